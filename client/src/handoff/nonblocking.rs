//! The backend side of handoff on tokio (the `async` feature).

use std::net::TcpStream;
use std::path::Path;

use tcpmux_proto::handoff::{encode_ack, encode_register, encode_register_with_acks, FRAME_LEN};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};

use super::{check_answer, decode, is_old_daemon, receive, Handoff, HandoffError};

/// A registered backend on tokio.
pub struct AsyncBackend {
    control: tokio::net::UnixStream,
}

impl AsyncBackend {
    /// Connects to tcpmuxd's `handoff_socket` and registers `names`, acknowledging
    /// each client (a tcpmuxd from before acknowledgements gets a plain one).
    pub async fn register(
        control: impl AsRef<Path>,
        names: &[&str],
    ) -> Result<AsyncBackend, HandoffError> {
        let names = super::names(names)?;
        let path = control.as_ref();
        match AsyncBackend::register_once(path, &encode_register_with_acks(&names)).await {
            Err(HandoffError::Refused(reason)) if is_old_daemon(&reason) => {
                AsyncBackend::register_once(path, &encode_register(&names)).await
            }
            other => other,
        }
    }

    async fn register_once(path: &Path, line: &[u8]) -> Result<AsyncBackend, HandoffError> {
        let mut control = tokio::net::UnixStream::connect(path).await?;
        control.write_all(line).await?;
        let mut answer = Vec::new();
        let mut byte = [0u8; 1];
        loop {
            if control.read(&mut byte).await? == 0 {
                return Err(HandoffError::Closed);
            }
            if byte[0] == b'\n' {
                break;
            }
            answer.push(byte[0]);
        }
        check_answer(&answer)?;
        Ok(AsyncBackend { control })
    }

    /// Waits for the next client; TCP clients come as tokio `TcpStream`s.
    pub async fn accept(&mut self) -> Result<Handoff<tokio::net::TcpStream>, HandoffError> {
        let mut frame = [0u8; FRAME_LEN];
        let control = &self.control;
        let (mut filled, fd) = control
            .async_io(Interest::READABLE, || receive(control, &mut frame))
            .await?;
        if filled == 0 {
            return Err(HandoffError::Closed);
        }
        while filled < FRAME_LEN {
            let n = self.control.read(&mut frame[filled..]).await?;
            if n == 0 {
                return Err(HandoffError::Closed);
            }
            filled += n;
        }
        let (fd, frame) = decode(&frame, fd)?;
        if let Some(seq) = frame.seq {
            self.control.write_all(&encode_ack(seq)).await?;
        }
        let std_stream = TcpStream::from(fd);
        std_stream.set_nonblocking(true)?;
        Ok(Handoff::new(
            tokio::net::TcpStream::from_std(std_stream)?,
            frame,
        ))
    }
}
