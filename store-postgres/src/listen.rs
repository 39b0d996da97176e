//! Waiting for appends to one stream: `LISTEN` on a dedicated connection (a pooled one would
//! miss notifications while it served other requests).

use std::time::Duration;

use ctxlog::store::{StoreError, StreamId};
use postgres::fallible_iterator::FallibleIterator;
use postgres::Client;

use crate::channel;
use crate::connect::Connector;
use crate::error::{store_error, unavailable};
use crate::options::{client_config, PgOptions};

/// A connection listening on one stream's channel. Created by [`crate::PgStore::listen`].
pub struct Listener {
    connector: Connector,
    location: String,
    channel: String,
    client: Option<Client>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener").field("location", &self.location).field("channel", &self.channel).finish()
    }
}

impl Listener {
    /// Connects to `url` (read-only) and listens for appends to `stream`.
    pub fn open(url: &str, stream: StreamId) -> Result<Listener, StoreError> {
        let opts = PgOptions { read_only: true, ..PgOptions::default() };
        let (connector, _) = client_config(url, &opts)?;
        Self::new(connector, stream)
    }

    pub(crate) fn new(connector: Connector, stream: StreamId) -> Result<Listener, StoreError> {
        let location = connector.location().to_owned();
        let mut listener = Listener { connector, location, channel: channel(stream), client: None };
        listener.connect()?;
        Ok(listener)
    }

    fn connect(&mut self) -> Result<&mut Client, StoreError> {
        let mut client = self.connector.connect("connect to listen")?;
        // The channel is `ctxlog_` plus hex digits, so quoting it is all the escaping needed.
        client
            .batch_execute(&format!("LISTEN \"{}\"", self.channel))
            .map_err(|e| store_error(&self.location, &format!("LISTEN {}", self.channel), e))?;
        Ok(self.client.insert(client))
    }

    /// Blocks until a writer appends to the stream or `timeout` passes. `Ok(true)`: something
    /// may have been appended (a notification arrived, or the connection was re-established
    /// and notifications may have been missed), so read the log; `Ok(false)`: the timeout
    /// passed quietly. A server that cannot be reached is [`StoreError::Unavailable`]; the
    /// next call tries to reconnect.
    pub fn wait(&mut self, timeout: Duration) -> Result<bool, StoreError> {
        let client = match self.client.as_mut() {
            Some(c) if !c.is_closed() => c,
            _ => {
                self.client = None;
                self.connect()?;
                return Ok(true);
            }
        };
        let outcome = {
            let mut notifications = client.notifications();
            let first = notifications.timeout_iter(timeout).next();
            // Several appends may have notified: one read of the log covers them all.
            while let Ok(Some(_)) = notifications.iter().next() {}
            first
        };
        let closed = client.is_closed();
        let woke = match outcome {
            Ok(Some(_)) => true,
            Ok(None) => false,
            Err(e) => {
                self.client = None;
                return Err(store_error(&self.location, &format!("wait on {}", self.channel), e));
            }
        };
        if closed {
            self.client = None;
            return Err(unavailable(&self.location, format!("the connection listening on {} closed", self.channel)));
        }
        Ok(woke)
    }
}
