//! Connecting to one Redis or to a Redis Cluster, behind one command interface.

use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, Pipeline, RedisFuture, Value};

use super::shared::RedisConfigError;

/// Where Redis is: one node, or the seed nodes of a cluster.
#[derive(Debug, Clone)]
pub enum RedisTarget {
    Single(String),
    Cluster(Vec<String>),
}

impl RedisTarget {
    /// `redis://…` = one node; `redis+cluster://h:p,h:p` or `redis://h:p,redis://h:p` = cluster.
    pub fn parse(url: &str) -> Result<RedisTarget, RedisConfigError> {
        let url = url.trim();
        let bad = |why: String| RedisConfigError(format!("REDIS_URL {}: {why}", mask_url(url)));
        let (cluster, rest) = match url.strip_prefix("redis+cluster://") {
            Some(rest) => (true, rest.to_owned()),
            None => (url.contains(','), url.to_owned()),
        };
        let nodes: Vec<String> = rest
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(|n| {
                if n.contains("://") {
                    n.to_owned()
                } else {
                    format!("redis://{n}")
                }
            })
            .collect();
        if nodes.is_empty() {
            return Err(bad("no Redis node".into()));
        }
        for node in &nodes {
            Client::open(node.as_str()).map_err(|e| bad(format!("invalid: {e}")))?;
        }
        Ok(if cluster {
            RedisTarget::Cluster(nodes)
        } else {
            RedisTarget::Single(nodes.into_iter().next().unwrap_or_default())
        })
    }

    /// The node the subscriber listens on. On a cluster any node will do: PUBLISH is broadcast
    /// to every node of the cluster.
    pub fn pubsub_nodes(&self) -> Vec<String> {
        match self {
            RedisTarget::Single(url) => vec![url.clone()],
            RedisTarget::Cluster(nodes) => nodes.clone(),
        }
    }

    pub async fn connect(&self, timeout: Duration) -> redis::RedisResult<Conn> {
        match self {
            RedisTarget::Single(url) => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout));
                let con = Client::open(url.as_str())?
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                Ok(Conn::Single(con))
            }
            RedisTarget::Cluster(nodes) => {
                let client = redis::cluster::ClusterClient::builder(nodes.clone())
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .retries(2)
                    .build()?;
                let con = tokio::time::timeout(timeout * 3, client.get_async_connection())
                    .await
                    .map_err(|_| {
                        redis::RedisError::from(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "cluster connect timed out",
                        ))
                    })??;
                Ok(Conn::Cluster(con))
            }
        }
    }
}

/// A live connection to either kind of deployment.
#[derive(Clone)]
pub enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// The URL with any password replaced by `***`, for logs.
pub fn mask_url(url: &str) -> String {
    url.split(',')
        .map(|part| {
            let Some((scheme, rest)) = part.split_once("://") else {
                return part.to_owned();
            };
            match rest.rsplit_once('@') {
                Some((userinfo, host)) => {
                    let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
                    if userinfo.contains(':') {
                        format!("{scheme}://{user}:***@{host}")
                    } else {
                        format!("{scheme}://***@{host}")
                    }
                }
                None => part.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_passwords() {
        assert_eq!(
            mask_url("redis://user:secret@h:6379/0"),
            "redis://user:***@h:6379/0"
        );
        assert_eq!(mask_url("redis://:secret@h:1"), "redis://:***@h:1");
        assert_eq!(mask_url("redis://h:1"), "redis://h:1");
        assert_eq!(
            mask_url("redis://a:p@h:1,redis://a:p@g:2"),
            "redis://a:***@h:1,redis://a:***@g:2"
        );
    }

    #[test]
    fn parses_single_and_cluster_targets() {
        assert!(matches!(
            RedisTarget::parse("redis://127.0.0.1:6379").unwrap(),
            RedisTarget::Single(_)
        ));
        match RedisTarget::parse("redis+cluster://127.0.0.1:7000,127.0.0.1:7001").unwrap() {
            RedisTarget::Cluster(nodes) => assert_eq!(
                nodes,
                vec!["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"]
            ),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            RedisTarget::parse("redis://a:1,redis://b:2").unwrap(),
            RedisTarget::Cluster(_)
        ));
        assert!(RedisTarget::parse("").is_err());
        assert!(RedisTarget::parse("http://nope").is_err());
    }
}
