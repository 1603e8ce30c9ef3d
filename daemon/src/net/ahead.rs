//! Bytes read from a connection before their reader wanted them (past the
//! request line, or by a peek into a TLS session), handed out again ahead of
//! what the connection still holds. One cursor over one buffer: reading
//! them again moves the cursor, never the bytes.

use tokio::io::ReadBuf;

#[derive(Debug, Default)]
pub(crate) struct Ahead {
    bytes: Vec<u8>,
    /// How much of `bytes` has been read again.
    at: usize,
}

impl Ahead {
    /// `bytes`, kept as they are, not copied.
    pub(crate) fn new(bytes: Vec<u8>) -> Ahead {
        Ahead { bytes, at: 0 }
    }

    /// What is left to read again.
    pub(crate) fn pending(&self) -> &[u8] {
        &self.bytes[self.at..]
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.at == self.bytes.len()
    }

    /// Copies as much of what is left into `buf` as it holds.
    pub(crate) fn read_into(&mut self, buf: &mut ReadBuf<'_>) {
        let n = self.pending().len().min(buf.remaining());
        buf.put_slice(&self.pending()[..n]);
        self.at += n;
        if self.is_empty() {
            // Read again in full: the buffer's memory goes back now.
            *self = Ahead::default();
        }
    }

    /// Adds `more` behind what is left.
    pub(crate) fn extend(&mut self, more: &[u8]) {
        self.bytes.extend_from_slice(more);
    }

    /// Puts `front` before what is left.
    pub(crate) fn put_back(&mut self, front: Vec<u8>) {
        self.bytes.drain(..self.at);
        self.bytes.splice(0..0, front);
        self.at = 0;
    }

    /// What is left, as an owned buffer.
    pub(crate) fn into_pending(mut self) -> Vec<u8> {
        self.bytes.drain(..self.at);
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_come_out_in_order_whatever_the_reads_and_put_backs() {
        let mut ahead = Ahead::new(b"world".to_vec());
        ahead.put_back(b"hello ".to_vec());
        ahead.extend(b"!");
        let mut out = [0u8; 4];
        let mut buf = ReadBuf::new(&mut out);
        ahead.read_into(&mut buf);
        assert_eq!(buf.filled(), b"hell");
        ahead.put_back(b"(".to_vec());
        assert_eq!(ahead.pending(), b"(o world!");
        assert_eq!(ahead.into_pending(), b"(o world!");
        let mut ahead = Ahead::new(b"ab".to_vec());
        let mut out = [0u8; 8];
        let mut buf = ReadBuf::new(&mut out);
        ahead.read_into(&mut buf);
        assert!(ahead.is_empty() && ahead.bytes.capacity() == 0);
    }
}
