# shellcheck shell=bash
# What the project's scripts share; sourced by them (`. "$(dirname "$0")/lib.sh"`), never run.
#
#   log MESSAGE...   `[script-name] MESSAGE` on standard error

SCRIPT_NAME=$(basename "$0")

log() { printf '[%s] %s\n' "$SCRIPT_NAME" "$*" >&2; }
