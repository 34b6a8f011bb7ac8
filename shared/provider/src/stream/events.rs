//! A stream's SSE bytes read as neutral events, incrementally: the SSE decoder and the event
//! reader of one protocol, their buffers kept from one push to the next. What reads a whole
//! stream back (a digest, a plain answer) is written over this.

use crate::protocol::Protocol;
use crate::sse::{SseDecoder, SseEvent};

use super::upstream::{Ev, Upstream};

#[derive(Debug)]
pub(crate) struct EventReader {
    decoder: SseDecoder,
    upstream: Upstream,
    events: Vec<SseEvent>,
    evs: Vec<Ev>,
}

impl EventReader {
    pub fn new(protocol: Protocol) -> EventReader {
        EventReader {
            decoder: SseDecoder::new(),
            upstream: Upstream::new(protocol),
            events: Vec::new(),
            evs: Vec::new(),
        }
    }

    pub fn protocol(&self) -> Protocol {
        self.upstream.protocol()
    }

    /// Reads the complete events in `bytes` (plus what was buffered before), giving each
    /// neutral event to `on`.
    pub fn push(&mut self, bytes: &[u8], on: &mut impl FnMut(Ev)) {
        // The buffers are lent out while `event` borrows `self`, and kept for the next push.
        let mut events = std::mem::take(&mut self.events);
        self.decoder.push_into(bytes, &mut events);
        for event in events.drain(..) {
            self.event(&event, on);
        }
        self.events = events;
    }

    /// The stream ended: a last event without its blank line still counts.
    pub fn finish(&mut self, on: &mut impl FnMut(Ev)) {
        if let Some(event) = self.decoder.finish() {
            self.event(&event, on);
        }
    }

    fn event(&mut self, event: &SseEvent, on: &mut impl FnMut(Ev)) {
        let mut evs = std::mem::take(&mut self.evs);
        self.upstream.event(event, &mut evs);
        for ev in evs.drain(..) {
            on(ev);
        }
        self.evs = evs;
    }
}
