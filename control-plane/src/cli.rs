//! `switchyard-control-plane config export | plan -f FILE | apply -f FILE`: configuration as
//! code from the command line (docs/src/guides/config-as-code.md).
//!
//! The subcommands talk to Postgres directly (`DATABASE_URL`), through the very functions the
//! admin API's `/api/v1/config` endpoints run: no admin token or reachable replica is needed,
//! only the database, which is what a Kubernetes Job next to the control plane has. An apply
//! commits through the one audited write path, so every replica and proxy sees its revision.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::api::config_file::{self, PlanResponse, ResourceChange};
use crate::error::ApiError;

#[derive(Debug, Parser)]
#[command(
    name = "switchyard-control-plane config",
    about = "Export, plan and apply the fleet's configuration as a YAML file"
)]
struct ConfigCli {
    /// Postgres connection URL of the control plane.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, global = true)]
    database_url: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the fleet's configuration as YAML (deterministic: two exports of one state are
    /// byte-identical). Never prints a secret value.
    Export,
    /// Show what applying FILE would change and the traffic it would move; changes nothing.
    Plan {
        /// The configuration file (`-` reads standard input).
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Print the plan as JSON (the `/api/v1/config/plan` answer).
        #[arg(long)]
        json: bool,
        /// Exit 0 when the plan shows no changes, 2 when it shows changes and 1 on an error
        /// (without it, a plan that succeeds exits 0 whatever it shows): for CI to gate on drift.
        #[arg(long)]
        detailed_exitcode: bool,
    },
    /// Apply FILE in one transaction as one revision (nothing when it changes nothing).
    Apply {
        /// The configuration file (`-` reads standard input).
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Who the audit log names (default `config-apply`).
        #[arg(long, env = "SWITCHYARD_ACTOR", default_value = "config-apply")]
        actor: String,
        /// Print the result as JSON (the `/api/v1/config/apply` answer).
        #[arg(long)]
        json: bool,
    },
}

/// What a successful subcommand found: whether a plan showed changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Done,
    NoChanges,
    Changes,
}

/// With `plan --detailed-exitcode`, exit code 2 means "changes": an error of any kind (usage
/// included) is then 1, never 2.
const CHANGES: u8 = 2;

/// Runs `switchyard-control-plane config ...`; `args` starts with `config`.
pub fn run(args: Vec<std::ffi::OsString>) -> ExitCode {
    let detailed = args.iter().any(|a| a == "--detailed-exitcode");
    let usage_error = if detailed {
        ExitCode::FAILURE
    } else {
        ExitCode::from(2)
    };
    let cli = match ConfigCli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(error) if !error.use_stderr() => {
            let _ = error.print();
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            let _ = error.print();
            return usage_error;
        }
    };
    let Some(url) = cli.database_url.clone() else {
        eprintln!("switchyard-control-plane config: DATABASE_URL (or --database-url) is required");
        return usage_error;
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("switchyard-control-plane config: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(execute(&url, cli.command)) {
        Ok(Outcome::Changes) if detailed => ExitCode::from(CHANGES),
        Ok(_) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("switchyard-control-plane config: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The file's text, never reading more than the longest file allowed.
fn read(file: &Path) -> Result<String, String> {
    let text = if file.as_os_str() == "-" {
        switchyard_config::read_bounded(std::io::stdin(), "standard input")
    } else {
        switchyard_config::read_file(file)
    };
    text.map_err(|e| e.to_string())
}

/// An error as one line: the field path and the problem for a bad file.
fn message(error: ApiError) -> String {
    match error {
        ApiError::Internal(e) => format!("internal error: {e:#}"),
        other => other.to_string(),
    }
}

async fn execute(url: &str, command: Command) -> Result<Outcome, String> {
    let options: sqlx::postgres::PgConnectOptions = url
        .parse()
        .map_err(|_| "DATABASE_URL is not a postgres:// URL".to_owned())?;
    let pool = crate::db::pool(options);
    crate::db::migrate(&pool)
        .await
        .map_err(|e| format!("cannot migrate the database: {e}"))?;
    let env = |name: &str| std::env::var(name).ok();
    let mut outcome = Outcome::Done;
    let out = match command {
        Command::Export => config_file::export_yaml(&pool).await.map_err(message)?,
        Command::Plan { file, json, .. } => {
            let text = read(&file)?;
            let plan = config_file::plan(&pool, None, &text, &env)
                .await
                .map_err(message)?;
            outcome = if plan.changes.is_empty() {
                Outcome::NoChanges
            } else {
                Outcome::Changes
            };
            if json {
                to_json(&plan)?
            } else {
                render_plan(&plan)
            }
        }
        Command::Apply { file, actor, json } => {
            let text = read(&file)?;
            let applied = config_file::apply(&pool, &actor, &text, &env)
                .await
                .map_err(message)?;
            if json {
                to_json(&applied)?
            } else {
                let mut out = render_changes(&applied.changes);
                out.push_str(&match applied.revision {
                    Some(revision) => format!("Applied as revision {revision}.\n"),
                    None => "No changes: nothing applied.\n".to_owned(),
                });
                out
            }
        }
    };
    pool.close().await;
    let mut stdout = std::io::stdout().lock();
    std::io::Write::write_all(&mut stdout, out.as_bytes())
        .and_then(|()| std::io::Write::flush(&mut stdout))
        .map_err(|e| format!("cannot write to standard output: {e}"))?;
    Ok(outcome)
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, String> {
    serde_json::to_string_pretty(value)
        .map(|json| json + "\n")
        .map_err(|e| format!("cannot write JSON: {e}"))
}

fn short(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Null => "(unset)".to_owned(),
        other => other.to_string(),
    }
}

/// `+ channel "a"`, `~ route "m"` with a line per field, `- token "…"`.
pub fn render_changes(changes: &[ResourceChange]) -> String {
    let mut out = String::new();
    for change in changes {
        let sign = match change.action.as_str() {
            "add" => '+',
            "remove" => '-',
            _ => '~',
        };
        out.push_str(&format!("{sign} {} {:?}\n", change.resource, change.key));
        for field in &change.fields {
            if change.action == "add" {
                out.push_str(&format!("    {}: {}\n", field.field, short(&field.after)));
            } else {
                out.push_str(&format!(
                    "    {}: {} -> {}\n",
                    field.field,
                    short(&field.before),
                    short(&field.after)
                ));
            }
        }
    }
    out
}

fn probability(p: Option<f64>) -> String {
    p.map_or_else(|| "-".to_owned(), |p| format!("{p:.3}"))
}

/// The changes, the traffic they move, and a summary line.
pub fn render_plan(plan: &PlanResponse) -> String {
    let mut out = render_changes(&plan.changes);
    let traffic = &plan.traffic;
    if !traffic.affected.is_empty() {
        out.push_str("\nTraffic that would move:\n");
        for selection in &traffic.affected {
            let team = selection
                .team_id
                .map_or_else(|| "-".to_owned(), |t| t.to_string());
            out.push_str(&format!(
                "  {} (group {}, team {}): {} -> {}\n",
                selection.model,
                selection.group,
                team,
                selection.outcome_before,
                selection.outcome_after
            ));
            for member in &selection.members {
                out.push_str(&format!(
                    "    member {} ({}): {} -> {}\n",
                    member.member_id,
                    member.upstream_model,
                    probability(member.before),
                    probability(member.after)
                ));
            }
        }
    }
    for failing in &traffic.newly_failing {
        out.push_str(&format!(
            "  ! {} (group {}) would fail: {}\n",
            failing.model, failing.group, failing.outcome
        ));
    }
    let count = |action: &str| plan.changes.iter().filter(|c| c.action == action).count();
    if plan.changes.is_empty() {
        out.push_str("No changes.\n");
    } else {
        out.push_str(&format!(
            "Plan: {} to add, {} to change, {} to remove.\n",
            count("add"),
            count("change"),
            count("remove")
        ));
    }
    out
}
