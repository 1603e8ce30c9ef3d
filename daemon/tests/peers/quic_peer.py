"""A real QUIC peer for tests/udp.rs, with aioquic (PyPI).

  quic_peer.py server PORT TAG [SID]
                                 an echo server on 127.0.0.1:PORT/udp with a
                                 self-signed certificate: every stream is
                                 answered with TAG, then what it carried;
                                 prints "ready" once it listens; with SID
                                 (hex), every connection ID it issues
                                 carries SID after its first byte (QUIC-LB's
                                 plaintext layout)
  quic_peer.py client PORT NAME  a client of 127.0.0.1:PORT asking for the
                                 server name NAME: opens a stream, sends
                                 "hello", prints the answer; with
                                 BIG_HELLO set, it offers 40 more ALPN
                                 names, so that its ClientHello takes two
                                 Initial packets, as a post-quantum one does
  quic_peer.py migrate PORT NAME IP...
                                 a client that asks as `client` does, then
                                 moves to a socket on each IP in turn (a
                                 new address, as a NAT rebinding or a phone
                                 changing networks gives it) and asks again
                                 on the same connection from there: prints
                                 each answer on a line; with FRESH_ID set,
                                 each move also switches to a connection ID
                                 the server issued and the client has not
                                 used (active migration, RFC 9000 9.5)
Each run ends within 20 s.
"""

import asyncio
import datetime
import os
import socket
import ssl
import sys
import tempfile

from aioquic.asyncio import connect, serve
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import StreamDataReceived
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

ALPN = ["tcpmux-test"]


def certificate(directory):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "quic.test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    cert_path = os.path.join(directory, "cert.pem")
    key_path = os.path.join(directory, "key.pem")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return cert_path, key_path


def issue_ids_with(server_id):
    """Has aioquic's connections make every 8-byte connection ID (its
    default length) as a QUIC-LB server does: a random first byte, the
    server's ID, random bytes. Its 8-byte path challenges are made the same
    way, which leaves them unpredictable enough for a test."""
    import aioquic.quic.connection as connection

    class Os:
        def __getattr__(self, name):
            return getattr(os, name)

        def urandom(self, n):
            if n == 8:
                return os.urandom(1) + server_id + os.urandom(n - 1 - len(server_id))
            return os.urandom(n)

    connection.os = Os()


async def server(port, tag):
    class Echo(QuicConnectionProtocol):
        def quic_event_received(self, event):
            if isinstance(event, StreamDataReceived) and event.end_stream:
                self._quic.send_stream_data(
                    event.stream_id, tag + event.data, end_stream=True
                )
                self.transmit()

    configuration = QuicConfiguration(is_client=False, alpn_protocols=ALPN)
    with tempfile.TemporaryDirectory() as directory:
        configuration.load_cert_chain(*certificate(directory))
        await serve("127.0.0.1", port, configuration=configuration, create_protocol=Echo)
        print("ready", flush=True)
        await asyncio.sleep(20)


async def client(port, name):
    alpn = ALPN
    if os.environ.get("BIG_HELLO"):
        alpn = ALPN + ["filler-%02d-padding-to-spread-the-hello" % i for i in range(40)]
    configuration = QuicConfiguration(
        is_client=True,
        alpn_protocols=alpn,
        server_name=name,
        verify_mode=ssl.CERT_NONE,
    )
    async with connect("127.0.0.1", port, configuration=configuration) as peer:
        reader, writer = await peer.create_stream()
        writer.write(b"hello")
        writer.write_eof()
        print((await reader.read()).decode(), flush=True)


async def ask(peer, text):
    reader, writer = await peer.create_stream()
    writer.write(text)
    writer.write_eof()
    return (await reader.read()).decode()


async def fresh_id(quic):
    """Switches to a connection ID the server issued and the client has not
    used, waiting (up to 5 s) for the server's NEW_CONNECTION_ID frames if
    none is there yet: aioquic's change_connection_id does nothing then."""
    for _ in range(100):
        if quic._peer_cid_available:
            break
        await asyncio.sleep(0.05)
    before = quic._peer_cid.cid
    quic.change_connection_id()
    if quic._peer_cid.cid == before:
        raise RuntimeError("no fresh connection ID to move to")


async def migrate(port, name, addresses):
    configuration = QuicConfiguration(
        is_client=True,
        alpn_protocols=ALPN,
        server_name=name,
        verify_mode=ssl.CERT_NONE,
    )
    loop = asyncio.get_running_loop()
    async with connect("127.0.0.1", port, configuration=configuration) as peer:
        print(await ask(peer, b"before"), flush=True)
        for address in addresses:
            if os.environ.get("FRESH_ID"):
                # Switched before the move, on the old path: anything the
                # client sends from the new address carries the fresh ID.
                await fresh_id(peer._quic)
            old = peer._transport
            # The same connection from a new socket: the protocol object
            # takes the new transport; the old socket is closed, so
            # nothing reaches the client there any more.
            # aioquic's client socket is IPv6 with IPv4 mapped, so is this one.
            sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(("::ffff:" + address, 0, 0, 0))
            await loop.create_datagram_endpoint(lambda: peer, sock=sock)
            old.close()
            # A PING from the new address first, so the server sees the move.
            await asyncio.wait_for(peer.ping(), 5)
            print(await asyncio.wait_for(ask(peer, address.encode()), 5), flush=True)


def main():
    mode, port, word = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if mode == "server":
        if len(sys.argv) > 4:
            issue_ids_with(bytes.fromhex(sys.argv[4]))
        run = server(port, word.encode())
    elif mode == "migrate":
        run = migrate(port, word, sys.argv[4:])
    else:
        run = client(port, word)
    asyncio.run(asyncio.wait_for(run, 20))


if __name__ == "__main__":
    main()
