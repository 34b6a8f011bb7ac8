# shellcheck shell=bash
# What the project's scripts share; sourced by them (`. "$(dirname "$0")/lib.sh"`), never run.
#
#   log MESSAGE...                 `[script-name] MESSAGE` on standard error
#   wait_http URL [SECONDS] [PID]  until URL answers 2xx (true), or SECONDS (10) pass or process
#                                  PID (when given) exits (false)

SCRIPT_NAME=$(basename "$0")

log() { printf '[%s] %s\n' "$SCRIPT_NAME" "$*" >&2; }

wait_http() {
  local i
  for ((i = 0; i < ${2:-10} * 10; i++)); do
    curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
    if [ -n "${3:-}" ]; then kill -0 "$3" 2>/dev/null || return 1; fi
    sleep 0.1
  done
  return 1
}
