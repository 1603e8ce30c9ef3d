//! An exec'd program behind a TLS listener: it holds one end of a socketpair,
//! and the daemon moves plaintext between that and the TLS session until the
//! program's output ends.

use std::io;
use std::os::unix::net::UnixStream;

use tokio::io::AsyncWriteExt;

use crate::net::conn::Conn;
use crate::net::stream::Metered;

/// Relays until the program's side of the pair reaches EOF (all its holders
/// closed it), then ends the TLS stream with close_notify. The client's EOF
/// is passed on as a half-close, so the program reads the end of its input.
pub(super) async fn relay(conn: &mut Metered<Conn>, ours: UnixStream) -> io::Result<()> {
    ours.set_nonblocking(true)?;
    let ours = tokio::net::UnixStream::from_std(ours)?;
    let (mut from_program, mut to_program) = ours.into_split();
    let (mut from_client, mut to_client) = tokio::io::split(conn);
    let input = async {
        let _ = tokio::io::copy(&mut from_client, &mut to_program).await;
        let _ = to_program.shutdown().await;
        // The session's end is the output's: nothing to do here but wait.
        std::future::pending::<()>().await
    };
    let output = async {
        tokio::io::copy(&mut from_program, &mut to_client).await?;
        to_client.shutdown().await
    };
    tokio::select! {
        result = output => result,
        () = input => Ok(()),
    }
}
