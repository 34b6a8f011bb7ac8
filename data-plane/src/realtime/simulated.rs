//! A simulated channel's (`provider: mock`) realtime session, served in this process: the
//! simulator's session ([`switchyard_sim::RealtimeSim`], the answers the mock upstream server
//! gives too) on one end of an in-memory pipe, the session's relay on the other, so the relay
//! treats it as any upstream socket.

use futures_util::{SinkExt, StreamExt};
use switchyard_sim::RealtimeSim;
use tokio::io::DuplexStream;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// Bytes the in-memory pipe buffers each way.
const PIPE_BYTES: usize = 64 * 1024;

/// The relay's end of a new simulated session of `model`; the simulator's end is served by a
/// task of its own until either end closes.
pub async fn open(model: &str, config: WebSocketConfig) -> WebSocketStream<DuplexStream> {
    let (ours, theirs) = tokio::io::duplex(PIPE_BYTES);
    let mut session = RealtimeSim::new(model);
    tokio::spawn(async move {
        let mut socket = WebSocketStream::from_raw_socket(theirs, Role::Server, Some(config)).await;
        if socket.send(Message::text(session.opened())).await.is_err() {
            return;
        }
        while let Some(Ok(message)) = socket.next().await {
            let Message::Text(text) = message else {
                continue;
            };
            for event in session.answer(text.as_str()).0 {
                if socket.send(Message::text(event)).await.is_err() {
                    return;
                }
            }
        }
    });
    WebSocketStream::from_raw_socket(ours, Role::Client, Some(config)).await
}
