//! A client whose bytes must pass through the daemon (a TLS session, or
//! bytes read past its request line) given to a program or a handoff backend:
//! they get one end of a socketpair, and the daemon moves plaintext between
//! the other end and the client until their output ends.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;

use tokio::io::AsyncWriteExt;

use super::conn::Conn;
use super::relay::pass_on;
use super::stream::Metered;

/// A socketpair: the end to give away (blocking, as programs and backends
/// expect), and the daemon's end for [`relay`].
pub(crate) fn pair() -> io::Result<(OwnedFd, UnixStream)> {
    let (theirs, ours) = UnixStream::pair()?;
    Ok((OwnedFd::from(theirs), ours))
}

/// Relays until the other side of the pair reaches EOF (all its holders
/// closed it), then ends the client's stream (with close_notify over TLS).
/// The client's EOF is passed on as a half-close, so the program or backend
/// reads the end of its input.
pub(crate) async fn relay(conn: &mut Metered<Conn>, ours: UnixStream) -> io::Result<()> {
    ours.set_nonblocking(true)?;
    let ours = tokio::net::UnixStream::from_std(ours)?;
    let (mut from_program, mut to_program) = ours.into_split();
    let (mut from_client, mut to_client) = tokio::io::split(conn);
    let input = async {
        // A client that fails ends the program's input all the same.
        if pass_on(&mut from_client, &mut to_program, |_| {})
            .await
            .is_err()
        {
            let _ = to_program.shutdown().await;
        }
        // The session's end is the output's: nothing to do here but wait.
        std::future::pending::<()>().await
    };
    let output = pass_on(&mut from_program, &mut to_client, |_| {});
    tokio::select! {
        result = output => result,
        () = input => Ok(()),
    }
}
