//! discard (RFC 863): read and drop everything until the client's EOF, with a
//! buffer lent only while bytes are arriving.

use std::io;

use crate::net::conn::Conn;
use crate::net::stream::Metered;

const CHUNK: usize = 64 * 1024;

pub(super) async fn serve(conn: &mut Metered<Conn>) -> io::Result<()> {
    while conn.read_lent(CHUNK).await?.1 != 0 {}
    Ok(())
}
