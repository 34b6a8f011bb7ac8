//! One leader across control-plane replicas: a Postgres session-level advisory lock held on a
//! dedicated connection. Postgres releases it when that connection ends (the leader stopped,
//! crashed or lost the network), so the lead moves to whichever replica asks next.

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

/// The advisory lock key of the recovery-probe leader (any constant unique to this use;
/// advisory locks are per database, so fleets in different databases do not collide).
pub const RECOVERY_LOCK_KEY: i64 = 0x5377_5964_5052_4f42; // "SwYdPROB"

/// A replica's claim on the lead. `Some(connection)` while it holds the lock.
pub struct Leadership {
    options: PgConnectOptions,
    key: i64,
    held: Option<PgConnection>,
}

impl Leadership {
    pub fn new(options: PgConnectOptions, key: i64) -> Leadership {
        Leadership {
            options,
            key,
            held: None,
        }
    }

    pub fn is_leader(&self) -> bool {
        self.held.is_some()
    }

    /// Makes sure of the lead: while held, checks that the lock's connection is alive (a dead
    /// connection means Postgres has already released the lock); while not held, tries once to
    /// take it. Returns whether this replica leads now.
    pub async fn ensure(&mut self) -> anyhow::Result<bool> {
        if let Some(conn) = self.held.as_mut() {
            // A session-level advisory lock lasts as long as its session: a live connection
            // still holds it.
            match sqlx::query("SELECT 1").execute(&mut *conn).await {
                Ok(_) => return Ok(true),
                Err(error) => {
                    self.held = None;
                    return Err(anyhow::Error::new(error).context("checking the leader lock"));
                }
            }
        }
        let mut conn = PgConnection::connect_with(&self.options)
            .await
            .map_err(|e| anyhow::Error::new(e).context("connecting for the leader lock"))?;
        let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(self.key)
            .fetch_one(&mut conn)
            .await
            .map_err(|e| anyhow::Error::new(e).context("pg_try_advisory_lock"))?;
        if taken {
            self.held = Some(conn);
        } else {
            // Not ours: do not keep an idle connection around.
            let _ = conn.close().await;
        }
        Ok(taken)
    }

    /// Gives the lead up (shutdown): closing the connection releases the lock.
    pub async fn release(&mut self) {
        if let Some(conn) = self.held.take() {
            let _ = conn.close().await;
        }
    }
}
