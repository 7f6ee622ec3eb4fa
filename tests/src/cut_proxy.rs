//! A loopback TCP proxy that loses one reply on demand: the fault of a server that ran a
//! command and died (or dropped its connection) before the reply got out.
//!
//! Every connection it accepts is relayed to the target in both directions. After
//! [`CutProxy::cut_reply_to`]`(patterns)`, the next request chunk holding every pattern still
//! reaches the server, which runs it; when the server's answer comes back, the proxy closes
//! that connection on both sides instead of passing the answer on. The client sees a dropped
//! connection with its command's outcome unknown, which is what a client's resend logic has to
//! get right.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

#[derive(Default)]
struct Shared {
    /// The patterns of the request whose reply is to be lost, until a request holds them.
    armed: Mutex<Option<Vec<Vec<u8>>>>,
    /// Replies lost so far.
    cuts: AtomicUsize,
}

/// The proxy; it stops accepting and relaying when dropped.
pub struct CutProxy {
    port: u16,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl CutProxy {
    /// Listens on a free loopback port and relays to `target`.
    pub async fn start(target: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared::default());
        let accept = tokio::spawn(accept_loop(listener, target, shared.clone()));
        Ok(CutProxy {
            port,
            shared,
            accept,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Loses the reply to the next request that holds every one of `patterns` (see the
    /// module docs).
    pub fn cut_reply_to(&self, patterns: &[&[u8]]) {
        *lock(&self.shared.armed) = Some(patterns.iter().map(|p| p.to_vec()).collect());
    }

    /// How many replies were lost.
    pub fn cuts(&self) -> usize {
        self.shared.cuts.load(Ordering::SeqCst)
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn accept_loop(listener: TcpListener, target: SocketAddr, shared: Arc<Shared>) {
    let mut relays = tokio::task::JoinSet::new();
    while let Ok((client, _)) = listener.accept().await {
        let shared = shared.clone();
        relays.spawn(async move {
            if let Ok(server) = TcpStream::connect(target).await {
                relay(client, server, shared).await;
            }
        });
    }
}

/// Relays one connection until either side closes it, or until the reply to an armed request
/// arrives.
async fn relay(client: TcpStream, server: TcpStream, shared: Arc<Shared>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let cut_next_reply = Arc::new(AtomicBool::new(false));
    let requests = {
        let cut = cut_next_reply.clone();
        let shared = shared.clone();
        async move {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match client_read.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                {
                    let mut armed = lock(&shared.armed);
                    if armed.as_deref().is_some_and(|patterns| {
                        patterns.iter().all(|pattern| contains(&buf[..n], pattern))
                    }) {
                        *armed = None;
                        cut.store(true, Ordering::SeqCst);
                    }
                }
                if server_write.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    };
    let replies = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if cut_next_reply.load(Ordering::SeqCst) {
                shared.cuts.fetch_add(1, Ordering::SeqCst);
                return;
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    // Whichever direction ends first ends the connection: dropping the halves closes both
    // sockets.
    tokio::select! {
        () = requests => {}
        () = replies => {}
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty()
        && haystack
            .windows(needle.len())
            .any(|window| window == needle)
}
