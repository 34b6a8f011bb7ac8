//! One leader across control-plane replicas: a Postgres session-level advisory lock held on a
//! dedicated connection. Postgres releases it when that session ends (the leader stopped,
//! crashed or lost the network), so the lead moves to whichever replica asks next.

use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

/// The advisory lock key of the recovery-probe leader (any constant unique to this use;
/// advisory locks are per database, so fleets in different databases do not collide).
pub const RECOVERY_LOCK_KEY: i64 = 0x5377_5964_5052_4f42; // "SwYdPROB"

/// A stuck connection must not keep a replica believing it leads.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A replica's claim on the lead: its own connection (kept between attempts) and whether that
/// session holds the lock.
pub struct Leadership {
    options: PgConnectOptions,
    key: i64,
    conn: Option<PgConnection>,
    leading: bool,
}

impl Leadership {
    pub fn new(options: PgConnectOptions, key: i64) -> Leadership {
        Leadership {
            options,
            key,
            conn: None,
            leading: false,
        }
    }

    pub fn is_leader(&self) -> bool {
        self.leading
    }

    /// Makes sure of the lead: while leading, checks that the lock's session is alive (a dead
    /// one means Postgres has already released the lock); otherwise tries once to take it.
    /// Returns whether this replica leads now. Any error drops the connection and the lead.
    pub async fn ensure(&mut self) -> anyhow::Result<bool> {
        match tokio::time::timeout(CALL_TIMEOUT, self.attempt()).await {
            Ok(Ok(leading)) => {
                self.leading = leading;
                Ok(leading)
            }
            Ok(Err(error)) => {
                self.drop_session();
                Err(error)
            }
            Err(_) => {
                self.drop_session();
                Err(anyhow::anyhow!(
                    "the leader-lock connection did not answer within {} s",
                    CALL_TIMEOUT.as_secs()
                ))
            }
        }
    }

    async fn attempt(&mut self) -> anyhow::Result<bool> {
        let conn = match &mut self.conn {
            Some(conn) => conn,
            None => {
                self.leading = false;
                let conn = PgConnection::connect_with(&self.options)
                    .await
                    .map_err(|e| anyhow::Error::new(e).context("connecting for the leader lock"))?;
                self.conn.insert(conn)
            }
        };
        if self.leading {
            // A session-level advisory lock lasts as long as its session: alive means held.
            sqlx::query("SELECT 1")
                .execute(&mut *conn)
                .await
                .map_err(|e| anyhow::Error::new(e).context("checking the leader lock"))?;
            return Ok(true);
        }
        // Called only while not holding it: the lock is re-entrant and would stack otherwise.
        let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(self.key)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| anyhow::Error::new(e).context("pg_try_advisory_lock"))?;
        Ok(taken)
    }

    fn drop_session(&mut self) {
        // Dropping the connection closes the socket; Postgres ends the session and its locks.
        self.conn = None;
        self.leading = false;
    }

    /// Gives the lead up (shutdown): closing the session releases the lock at once.
    pub async fn release(&mut self) {
        self.leading = false;
        if let Some(conn) = self.conn.take() {
            let _ = tokio::time::timeout(CALL_TIMEOUT, conn.close()).await;
        }
    }
}
