//! Serving threads: client connections are served by worker threads, each running a
//! single-threaded tokio runtime with its own listener on the proxy's address (`SO_REUSEPORT`:
//! the kernel spreads new connections over the listeners), so a request stays on the thread that
//! accepted it from the first byte to the last — no work stealing and no cross-thread wake-ups on
//! the request path. Each worker also has its own upstream connection pool
//! ([`crate::state::AppState::client`]). Background work (snapshots, Redis, usage reports,
//! probes) stays on the process's main runtime.
//!
//! The trade-off is the one nginx makes: a connection is bound to its worker for its life, so a
//! few very busy keep-alive connections can load one worker more than another.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::time::Duration;

use switchyard_server::Server;
use tokio::net::TcpSocket;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::server::Gateway;

/// Pending connections each listener queues (as `TcpListener::bind` does).
const BACKLOG: u32 = 1024;

/// The number of workers for a `--workers` value: the value, or for 0 the CPUs this process may
/// use (cgroup quotas included).
pub fn count(requested: usize) -> usize {
    if requested > 0 {
        return requested;
    }
    std::thread::available_parallelism().map_or(1, NonZeroUsize::get)
}

/// Binds `n` sockets to `addr`, each with `SO_REUSEPORT` (a port of 0 is chosen by the first and
/// shared by the others). They listen once their worker starts.
///
/// A port some process already listens on is refused (`AddrInUse`), as without `SO_REUSEPORT`:
/// a probe socket without it binds first, so a second proxy started by mistake on a taken port
/// fails instead of silently sharing its connections — unless the proxy holding the port is
/// draining ([`mark_draining`]): then this one is its restart and shares the port with it until
/// it stops, so a restart serves at once instead of failing while the old process finishes.
pub fn bind(addr: SocketAddr, n: usize) -> std::io::Result<(Vec<TcpSocket>, SocketAddr)> {
    if addr.port() != 0 {
        let probe = socket_for(addr)?;
        probe.set_reuseaddr(true)?;
        match probe.bind(addr) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && draining(addr) => {
                tracing::info!(%addr, "the proxy on this address is draining: sharing the port with it until it stops");
            }
            Err(e) => return Err(e),
        }
    }
    let mut sockets = Vec::with_capacity(n);
    let mut bound = addr;
    for _ in 0..n.max(1) {
        let socket = socket_for(bound)?;
        socket.set_reuseaddr(true)?;
        socket.set_reuseport(true)?;
        socket.set_nodelay(true)?;
        socket.bind(bound)?;
        bound = socket.local_addr()?;
        sockets.push(socket);
    }
    Ok((sockets, bound))
}

/// Held by a draining proxy: an abstract Unix socket named after its listen address, which a
/// proxy starting on that address looks for (abstract names belong to the network namespace and
/// vanish with the process, so a crashed proxy leaves none behind).
pub struct DrainingMark {
    _listener: std::os::unix::net::UnixListener,
}

fn drain_mark_name(addr: SocketAddr) -> String {
    format!("switchyard-data-plane-draining-{addr}")
}

/// Says "this address's proxy is draining" until the mark is dropped (process exit). `None` where
/// the mark cannot be made (not Linux, or another process holds it): a restart then waits for the
/// port as it would without it.
pub fn mark_draining(addr: SocketAddr) -> Option<DrainingMark> {
    #[cfg(target_os = "linux")]
    {
        use std::os::linux::net::SocketAddrExt;
        let name =
            std::os::unix::net::SocketAddr::from_abstract_name(drain_mark_name(addr)).ok()?;
        match std::os::unix::net::UnixListener::bind_addr(&name) {
            Ok(listener) => Some(DrainingMark {
                _listener: listener,
            }),
            Err(e) => {
                tracing::debug!(error = %e, "no draining mark: a restart waits for the port");
                None
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = addr;
        None
    }
}

/// Whether the proxy holding `addr` has said it is draining.
fn draining(addr: SocketAddr) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(drain_mark_name(addr))
            .and_then(|name| std::os::unix::net::UnixStream::connect_addr(&name))
            .is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = addr;
        false
    }
}

fn socket_for(addr: SocketAddr) -> std::io::Result<TcpSocket> {
    if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
}

/// Starts one worker thread per socket serving `gateway` through `server` (one connection
/// registry, so the connection cap is the process's). The returned future resolves once every
/// worker has stopped (after `stop` fires and its connections have drained), with the first
/// failure.
pub fn start(
    sockets: Vec<TcpSocket>,
    server: &Server,
    gateway: &Gateway,
    stop: &CancellationToken,
) -> Result<impl std::future::Future<Output = Result<(), String>>, String> {
    let mut done = Vec::with_capacity(sockets.len());
    for (index, socket) in sockets.into_iter().enumerate() {
        let (tx, rx) = oneshot::channel();
        let (server, gateway, stop) = (server.clone(), gateway.clone(), stop.clone());
        std::thread::Builder::new()
            .name(format!("switchyard-worker-{index}"))
            .spawn(move || {
                crate::state::enter_worker(index);
                let _ = tx.send(serve(socket, server, gateway, stop));
            })
            .map_err(|e| format!("cannot start worker thread {index}: {e}"))?;
        done.push(rx);
    }
    Ok(async move {
        let mut first_error = None;
        for rx in done {
            let result = rx
                .await
                .unwrap_or_else(|_| Err("a worker thread panicked".to_owned()));
            if let Err(e) = result {
                // Any worker failing fails the process (the others stop with it).
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    })
}

/// One worker: its runtime, its listener, the accept loop until `stop` and the drain.
fn serve(
    socket: TcpSocket,
    server: Server,
    gateway: Gateway,
    stop: CancellationToken,
) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a worker runtime: {e}"))?;
    runtime.block_on(async move {
        tokio::spawn(keep_a_timer_due(stop.clone()));
        let listener = socket
            .listen(BACKLOG)
            .map_err(|e| format!("cannot listen: {e}"))?;
        let result = server.serve(listener, gateway, stop.clone()).await;
        if result.is_err() {
            // Take the other workers down too: a proxy that lost a listener is not healthy.
            stop.cancel();
        }
        result.map_err(|e| format!("server failed: {e}"))
    })
}

/// How far ahead the timer [`keep_a_timer_due`] keeps is due.
const TIMER_TICK: Duration = Duration::from_secs(1);

/// Keeps a timer due within [`TIMER_TICK`] in this worker's timer wheel until `stop`.
///
/// Why: tokio's timer writes the runtime's wake-up eventfd whenever a new timer is due before
/// every timer the wheel held when the runtime last went to sleep (it cannot tell that the
/// thread registering it is the runtime's own, awake). Between two requests of a quiet
/// keep-alive connection the wheel is often empty, so the header deadline hyper arms for the next
/// request did that every time: one `write` and one extra `epoll_wait` per request at
/// concurrency 1. With this timer in the wheel, only a timer due within the tick still does,
/// which is what the wake-up is for.
async fn keep_a_timer_due(stop: CancellationToken) {
    while tokio::time::timeout(TIMER_TICK, stop.cancelled())
        .await
        .is_err()
    {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sockets_share_one_port_chosen_by_the_first() {
        let (sockets, addr) = bind("127.0.0.1:0".parse().unwrap(), 3).unwrap();
        assert_eq!(sockets.len(), 3);
        assert_ne!(addr.port(), 0);
        for socket in &sockets {
            assert_eq!(socket.local_addr().unwrap(), addr);
        }
        // All three listen on the one address at once.
        let listeners: Vec<_> = sockets.into_iter().map(|s| s.listen(16).unwrap()).collect();
        assert_eq!(listeners.len(), 3);
    }

    #[tokio::test]
    async fn a_port_another_listener_holds_is_refused() {
        // Our own workers' listeners (SO_REUSEPORT) on a port: a second group is refused.
        let (sockets, addr) = bind("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        let _listeners: Vec<_> = sockets.into_iter().map(|s| s.listen(16).unwrap()).collect();
        let taken = bind(addr, 2).map(|_| ()).unwrap_err();
        assert_eq!(taken.kind(), std::io::ErrorKind::AddrInUse);
        // A plain listener of another program on a port.
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let taken = bind(other.local_addr().unwrap(), 1)
            .map(|_| ())
            .unwrap_err();
        assert_eq!(taken.kind(), std::io::ErrorKind::AddrInUse);
        // Once it is gone, the port binds.
        let freed = other.local_addr().unwrap();
        drop(other);
        assert_eq!(bind(freed, 2).unwrap().1, freed);
    }

    #[tokio::test]
    async fn a_draining_proxys_port_is_shared_with_its_restart_and_only_while_it_drains() {
        let (sockets, addr) = bind("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        let _old: Vec<_> = sockets.into_iter().map(|s| s.listen(16).unwrap()).collect();
        assert_eq!(
            bind(addr, 2).map(|_| ()).unwrap_err().kind(),
            std::io::ErrorKind::AddrInUse
        );
        let mark = mark_draining(addr).unwrap();
        // A second mark for the same address cannot be made while the first stands.
        assert!(mark_draining(addr).is_none());
        let (restart, at) = bind(addr, 2).unwrap();
        assert_eq!(at, addr);
        let _new: Vec<_> = restart.into_iter().map(|s| s.listen(16).unwrap()).collect();
        // The mark gone (the old process exited), the port is its own again.
        drop(mark);
        assert!(!draining(addr));
    }

    #[tokio::test(start_paused = true)]
    async fn the_kept_timer_waits_on_until_stop_then_ends() {
        let stop = CancellationToken::new();
        let task = tokio::spawn(keep_a_timer_due(stop.clone()));
        // However long it runs, it is still there, re-arming its timer every tick.
        tokio::time::sleep(TIMER_TICK * 10 + TIMER_TICK / 2).await;
        assert!(!task.is_finished());
        stop.cancel();
        tokio::time::timeout(Duration::from_millis(1), task)
            .await
            .expect("it ends as soon as stop fires")
            .unwrap();
    }

    #[test]
    fn zero_workers_means_one_per_cpu() {
        assert_eq!(count(3), 3);
        assert!(count(0) >= 1);
    }
}
