//! Console sessions in Postgres (`sso_sessions`): created at the callback, found on every request
//! made with the session cookie, ended by signing out or by their expiry. The cookie holds the
//! secret; only its SHA-256 is stored, so reading the table gives no one a session.

use sha2::{Digest, Sha256};
use sqlx::PgPool;

use super::login::random_token;
use super::person::Person;
use crate::db::ts;
use crate::error::{ApiError, ApiResult};
use crate::role::Role;

/// The stored form of a session secret.
fn digest(secret: &str) -> String {
    switchyard_proto::hex(&Sha256::digest(secret.as_bytes()))
}

/// The CSRF token of the session whose secret is `secret`: derived from it, so it needs no
/// storage, and unknowable to a page that cannot read the HttpOnly cookie.
pub fn csrf_token(secret: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"switchyard console csrf\0");
    hasher.update(secret.as_bytes());
    switchyard_proto::hex(&hasher.finalize())
}

/// Whether `sent` is the CSRF token of the session `secret`, compared in time independent of
/// where they differ.
pub fn csrf_matches(secret: &str, sent: Option<&str>) -> bool {
    let Some(sent) = sent else { return false };
    let want: [u8; 32] = Sha256::digest(csrf_token(secret).as_bytes()).into();
    let got: [u8; 32] = Sha256::digest(sent.as_bytes()).into();
    want.iter()
        .zip(got.iter())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

/// A session as found: who, with which role (and team), until when.
#[derive(Debug, Clone)]
pub struct Session {
    pub person: Person,
    /// When it ends (RFC 3339).
    pub expires_at: String,
}

/// Starts a session for `person`, lasting `ttl_secs`; answers its secret (the cookie's value).
/// Sessions already expired are removed on the way.
pub async fn create(pool: &PgPool, person: &Person, ttl_secs: i64) -> ApiResult<String> {
    let secret = random_token()
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("no system randomness: {e}")))?;
    sqlx::query("DELETE FROM sso_sessions WHERE expires_at < now()")
        .execute(pool)
        .await?;
    sqlx::query(
        "INSERT INTO sso_sessions (hash, subject, name, role, team_id, expires_at) \
         VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))",
    )
    .bind(digest(&secret))
    .bind(&person.subject)
    .bind(&person.name)
    .bind(person.role.as_str())
    .bind(person.team)
    .bind(ttl_secs as f64)
    .execute(pool)
    .await?;
    Ok(secret)
}

/// The live session whose secret is `secret`; `None`: unknown, ended or expired.
pub async fn find(pool: &PgPool, secret: &str) -> ApiResult<Option<Session>> {
    let sql = format!(
        "SELECT subject, name, role, team_id, {} FROM sso_sessions \
         WHERE hash = $1 AND expires_at > now()",
        ts("expires_at")
    );
    let row: Option<(String, String, String, Option<i64>, String)> = sqlx::query_as(&sql)
        .bind(digest(secret))
        .fetch_optional(pool)
        .await?;
    let Some((subject, name, role, team, expires_at)) = row else {
        return Ok(None);
    };
    let role = Role::parse(&role)
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("a session has role {role:?}")))?;
    Ok(Some(Session {
        person: Person {
            subject,
            name,
            role,
            team,
        },
        expires_at,
    }))
}

/// Ends the session whose secret is `secret` (nothing when there is none).
pub async fn end(pool: &PgPool, secret: &str) -> ApiResult<()> {
    sqlx::query("DELETE FROM sso_sessions WHERE hash = $1")
        .bind(digest(secret))
        .execute(pool)
        .await?;
    Ok(())
}

/// The id of the team named `name`, if there is one.
pub async fn team_id(pool: &PgPool, name: &str) -> ApiResult<Option<i64>> {
    Ok(sqlx::query_scalar("SELECT id FROM teams WHERE name = $1")
        .bind(name)
        .fetch_optional(pool)
        .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_csrf_token_is_neither_the_secret_nor_its_stored_digest() {
        let secret = "s3cret";
        assert_ne!(csrf_token(secret), digest(secret));
        assert_ne!(csrf_token(secret), csrf_token("other"));
        assert_eq!(csrf_token(secret).len(), 64);
        assert!(csrf_matches(secret, Some(&csrf_token(secret))));
        assert!(!csrf_matches(secret, Some(&csrf_token("other"))));
        assert!(!csrf_matches(secret, Some("")));
        assert!(!csrf_matches(secret, None));
    }
}
