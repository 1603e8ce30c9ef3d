# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_tcpmux_bench_global_optspecs
    string join \n h/help V/version
end

function __fish_tcpmux_bench_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_tcpmux_bench_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_tcpmux_bench_using_subcommand
    set -l cmd (__fish_tcpmux_bench_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c tcpmux-bench -n "__fish_tcpmux_bench_needs_command" -s h -l help -d 'Print help'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_needs_command" -s V -l version -d 'Print version'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_needs_command" -f -a "source" -d 'A backend: every connection gets exactly --bytes bytes, then EOF'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_needs_command" -f -a "relay" -d 'A minimal TCPMUX proxy on tokio, a task per session (bench/c/relay.c\'s exchange and nothing else): the floor of that design, for bench/proxy_short.sh'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_needs_command" -f -a "sweep" -d 'Concurrency sweep: for each level, that many simultaneous downloads of one service on one async client thread; aggregate MB/s and fairness as a markdown table, and JSON lines and an SVG plot if asked'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_needs_command" -f -a "short" -d 'Short connections: C clients in a loop of connect, request, read the whole (short) answer, close; connections per second and latency percentiles'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_needs_command" -f -a "rpc" -d 'Connect per request, like a simple echo client: connect, (name), write --size bytes, read them back, half-close, close; in a loop'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_needs_command" -f -a "nagle" -d 'The Nagle stall on the negotiation itself: the name and its CRLF as two writes before reading the reply, against one write'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_needs_command" -f -a "nagle-established" -d 'The Nagle experiment on one established connection: request/response rounds (100 bytes, then CRLF) to a `lines` server, split in two writes with Nagle on, split with TCP_NODELAY, and whole'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_needs_command" -f -a "lines" -d 'A line backend for nagle-established: answers every line with itself, once the whole line is in'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_needs_command" -f -a "idle" -d 'Idle clients: open C connections that never send a name (or name --service, then send nothing), hold them, close'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_needs_command" -f -a "sources" -d 'Short connections from many source addresses (127.1.0.0 up), one after another: what a per-address rate limiter sees of many clients'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_needs_command" -f -a "idle-unix" -d 'Silent connections to a Unix socket (the handoff control socket), held, then counted by what the server did with them'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_needs_command" -f -a "tls-short" -d 'TLS short connections: a full handshake (no resumption, cipher suite TLS_AES_128_GCM_SHA256), an optional TCPMUX name, the whole short answer'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_needs_command" -f -a "tls-burst" -d 'A burst of ClientHellos: C connections each send a full handshake\'s ClientHello at once; reports how long until every server flight came'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_needs_command" -f -a "tls-bulk" -d 'TLS bulk download on one connection, read to its end; median of runs'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_needs_command" -f -a "udp-echo" -d 'A UDP backend: every datagram back to its sender, on one thread'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_needs_command" -f -a "udp" -d 'UDP flows: F sockets (each a flow at the proxy), each keeping W datagrams of --size bytes in flight to an echo backend; replies per second and their latency. A window of 1 is request/response; one flow with a large window is a bulk stream'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_needs_command" -f -a "udp-idle" -d 'Idle UDP flows: F sockets send one datagram each, wait for the reply, then hold (bench/udp.sh reads the proxy\'s memory meanwhile)'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_needs_command" -f -a "bulk" -d 'Bulk download: C connections at once, each reading to EOF'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand source" -l listen -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand source" -l bytes -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand source" -l ports -d 'Listen on this many consecutive ports from --listen\'s (one process as a pool of that many members); implies --tasks' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand source" -l tasks -d 'One task per connection on one thread, instead of a thread each (cheaper per connection, for connection-rate runs)'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand source" -s h -l help -d 'Print help'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand relay" -l listen -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand relay" -l to -d 'The backend every client is relayed to' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand relay" -s h -l help -d 'Print help'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand sweep" -l connect -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand sweep" -l service -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand sweep" -l expect -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand sweep" -l levels -d 'Comma-separated concurrency levels' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand sweep" -l json-out -d 'Write one JSON object per level here' -r -F
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand sweep" -l svg-out -d 'Write an SVG plot of aggregate MB/s and fairness here' -r -F
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand sweep" -l endless -d 'The service never ends (chargen): read exactly --expect bytes, then close'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand sweep" -s h -l help -d 'Print help'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand short" -l connect -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand short" -l service -d 'Service to ask for; its whole answer is read (e.g. daytime). Leave out for a plain port (inetd\'s own daytime): nothing is sent, the answer read' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand short" -l probe -d 'Send these first bytes instead of a name (for detecting listeners and sslh): `ssh` (an SSH banner), `tls:NAME` (a ClientHello for NAME), or a client\'s opening of `openvpn`, `xmpp` or `socks5`' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand short" -l connections -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand short" -l duration -d 'Seconds to run' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand short" -l label -d 'Label for the report line' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand short" -l fast-open -d 'TCP Fast Open (TCP_FASTOPEN_CONNECT): the request rides in the SYN'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand short" -l refused -d 'The name is expected to be refused: an exchange succeeds when the answer is a `-` line (the cost of a name the server does not have)'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand short" -l json -d 'Print one JSON object instead of the text line'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand short" -s h -l help -d 'Print help'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand rpc" -l connect -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand rpc" -l service -d 'Negotiate this service first (leave out for plain TCP echo servers)' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand rpc" -l size -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand rpc" -l connections -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand rpc" -l duration -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand rpc" -l interval-ms -d 'Start a request every this many milliseconds per client (an open loop: latency counts from when it was due), instead of back to back' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand rpc" -l label -d 'Label for the report line' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand rpc" -l json -d 'Print one JSON object instead of the text line'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand rpc" -s h -l help -d 'Print help'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand nagle" -l connect -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand nagle" -l service -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand nagle" -l iterations -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand nagle" -s h -l help -d 'Print help'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand nagle-established" -l connect -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand nagle-established" -l service -d 'Negotiate this service first (a tcpmuxd proxy to `lines`); leave out to talk to `lines` directly' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand nagle-established" -l warmup -d 'Rounds before measuring, to leave Linux\'s quick-ACK mode' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand nagle-established" -l rounds -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand nagle-established" -s h -l help -d 'Print help'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand lines" -l listen -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand lines" -s h -l help -d 'Print help'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand idle" -l connect -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand idle" -l connections -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand idle" -l service -d 'Name this service first (e.g. echo): established idle sessions' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand idle" -l partial -d 'Send the start of an opening instead, then stall (for a listener with `detect = true`): what a stalled detecting client costs' -r -f -a "client-hello\t'The first 3,000 bytes of a 16 KB ClientHello'
http-head\t'The first 1,000 bytes of an HTTP request head'"
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand idle" -l hold -d 'Seconds to hold them open' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand idle" -l tls-ca -d 'Over TLS (a `tls` listener whose certificate for `localhost` chains to this PEM CA): a full handshake, then --service inside' -r -F
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand idle" -l source -d 'Connect from this address (e.g. 127.0.1.1): one address has about 28,000 ephemeral ports, so 100,000 clients need several' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand idle" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand sources" -l connect -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand sources" -l service -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand sources" -l sources -d 'Distinct source addresses, used in turn' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand sources" -l connections -d 'Connections in all' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand sources" -s h -l help -d 'Print help'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand idle-unix" -l path -r -F
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand idle-unix" -l connections -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand idle-unix" -l hold -d 'Seconds to hold them open' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand idle-unix" -s h -l help -d 'Print help'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand tls-short" -l connect -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand tls-short" -l ca -d 'PEM CA that the server\'s certificate (for `localhost`) chains to' -r -F
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand tls-short" -l service -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand tls-short" -l server-name -d 'The name sent as SNI and checked in the server\'s certificate' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand tls-short" -l connections -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand tls-short" -l duration -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand tls-short" -l label -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand tls-short" -l resume -d 'Resume sessions from tickets (shared by all clients), as a returning client does; the first connection of each is full'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand tls-short" -s h -l help -d 'Print help'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand tls-burst" -l connect -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand tls-burst" -l ca -d 'PEM CA that the server\'s certificate (for `localhost`) chains to' -r -F
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand tls-burst" -l connections -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand tls-burst" -s h -l help -d 'Print help'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand tls-bulk" -l connect -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand tls-bulk" -l ca -r -F
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand tls-bulk" -l service -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand tls-bulk" -l expect -d 'Bytes the connection must carry (after a TCPMUX `+` line)' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand tls-bulk" -l repeat -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand tls-bulk" -l label -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand tls-bulk" -s h -l help -d 'Print help'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand udp-echo" -l listen -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand udp-echo" -s h -l help -d 'Print help'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand udp" -l connect -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand udp" -l flows -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand udp" -l window -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand udp" -l size -d 'Bytes per datagram (at least 8: the send time rides in them)' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand udp" -l threads -d 'Client threads the flows are spread over' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand udp" -l duration -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand udp" -l label -d 'Label for the report line' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand udp" -l json -d 'Print one JSON object instead of the text line'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand udp" -s h -l help -d 'Print help'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand udp-idle" -l connect -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand udp-idle" -l flows -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand udp-idle" -l hold -d 'Seconds to hold them' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand udp-idle" -s h -l help -d 'Print help'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand bulk" -l connect -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand bulk" -l service -d 'Negotiate this TCPMUX service first (leave out for plain TCP targets)' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand bulk" -l probe -d 'Send these first bytes instead (see `short`)' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand bulk" -l connections -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand bulk" -l expect -d 'Bytes each connection must receive; a mismatch fails the run' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand bulk" -l repeat -d 'Runs; the report gives the median aggregate rate' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand bulk" -l label -d 'Label for the report line' -r
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand bulk" -l json -d 'Print one JSON object instead of the text line'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand bulk" -s h -l help -d 'Print help'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand help; and not __fish_seen_subcommand_from source relay sweep short rpc nagle nagle-established lines idle sources idle-unix tls-short tls-burst tls-bulk udp-echo udp udp-idle bulk help" -f -a "source" -d 'A backend: every connection gets exactly --bytes bytes, then EOF'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand help; and not __fish_seen_subcommand_from source relay sweep short rpc nagle nagle-established lines idle sources idle-unix tls-short tls-burst tls-bulk udp-echo udp udp-idle bulk help" -f -a "relay" -d 'A minimal TCPMUX proxy on tokio, a task per session (bench/c/relay.c\'s exchange and nothing else): the floor of that design, for bench/proxy_short.sh'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand help; and not __fish_seen_subcommand_from source relay sweep short rpc nagle nagle-established lines idle sources idle-unix tls-short tls-burst tls-bulk udp-echo udp udp-idle bulk help" -f -a "sweep" -d 'Concurrency sweep: for each level, that many simultaneous downloads of one service on one async client thread; aggregate MB/s and fairness as a markdown table, and JSON lines and an SVG plot if asked'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand help; and not __fish_seen_subcommand_from source relay sweep short rpc nagle nagle-established lines idle sources idle-unix tls-short tls-burst tls-bulk udp-echo udp udp-idle bulk help" -f -a "short" -d 'Short connections: C clients in a loop of connect, request, read the whole (short) answer, close; connections per second and latency percentiles'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand help; and not __fish_seen_subcommand_from source relay sweep short rpc nagle nagle-established lines idle sources idle-unix tls-short tls-burst tls-bulk udp-echo udp udp-idle bulk help" -f -a "rpc" -d 'Connect per request, like a simple echo client: connect, (name), write --size bytes, read them back, half-close, close; in a loop'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand help; and not __fish_seen_subcommand_from source relay sweep short rpc nagle nagle-established lines idle sources idle-unix tls-short tls-burst tls-bulk udp-echo udp udp-idle bulk help" -f -a "nagle" -d 'The Nagle stall on the negotiation itself: the name and its CRLF as two writes before reading the reply, against one write'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand help; and not __fish_seen_subcommand_from source relay sweep short rpc nagle nagle-established lines idle sources idle-unix tls-short tls-burst tls-bulk udp-echo udp udp-idle bulk help" -f -a "nagle-established" -d 'The Nagle experiment on one established connection: request/response rounds (100 bytes, then CRLF) to a `lines` server, split in two writes with Nagle on, split with TCP_NODELAY, and whole'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand help; and not __fish_seen_subcommand_from source relay sweep short rpc nagle nagle-established lines idle sources idle-unix tls-short tls-burst tls-bulk udp-echo udp udp-idle bulk help" -f -a "lines" -d 'A line backend for nagle-established: answers every line with itself, once the whole line is in'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand help; and not __fish_seen_subcommand_from source relay sweep short rpc nagle nagle-established lines idle sources idle-unix tls-short tls-burst tls-bulk udp-echo udp udp-idle bulk help" -f -a "idle" -d 'Idle clients: open C connections that never send a name (or name --service, then send nothing), hold them, close'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand help; and not __fish_seen_subcommand_from source relay sweep short rpc nagle nagle-established lines idle sources idle-unix tls-short tls-burst tls-bulk udp-echo udp udp-idle bulk help" -f -a "sources" -d 'Short connections from many source addresses (127.1.0.0 up), one after another: what a per-address rate limiter sees of many clients'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand help; and not __fish_seen_subcommand_from source relay sweep short rpc nagle nagle-established lines idle sources idle-unix tls-short tls-burst tls-bulk udp-echo udp udp-idle bulk help" -f -a "idle-unix" -d 'Silent connections to a Unix socket (the handoff control socket), held, then counted by what the server did with them'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand help; and not __fish_seen_subcommand_from source relay sweep short rpc nagle nagle-established lines idle sources idle-unix tls-short tls-burst tls-bulk udp-echo udp udp-idle bulk help" -f -a "tls-short" -d 'TLS short connections: a full handshake (no resumption, cipher suite TLS_AES_128_GCM_SHA256), an optional TCPMUX name, the whole short answer'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand help; and not __fish_seen_subcommand_from source relay sweep short rpc nagle nagle-established lines idle sources idle-unix tls-short tls-burst tls-bulk udp-echo udp udp-idle bulk help" -f -a "tls-burst" -d 'A burst of ClientHellos: C connections each send a full handshake\'s ClientHello at once; reports how long until every server flight came'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand help; and not __fish_seen_subcommand_from source relay sweep short rpc nagle nagle-established lines idle sources idle-unix tls-short tls-burst tls-bulk udp-echo udp udp-idle bulk help" -f -a "tls-bulk" -d 'TLS bulk download on one connection, read to its end; median of runs'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand help; and not __fish_seen_subcommand_from source relay sweep short rpc nagle nagle-established lines idle sources idle-unix tls-short tls-burst tls-bulk udp-echo udp udp-idle bulk help" -f -a "udp-echo" -d 'A UDP backend: every datagram back to its sender, on one thread'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand help; and not __fish_seen_subcommand_from source relay sweep short rpc nagle nagle-established lines idle sources idle-unix tls-short tls-burst tls-bulk udp-echo udp udp-idle bulk help" -f -a "udp" -d 'UDP flows: F sockets (each a flow at the proxy), each keeping W datagrams of --size bytes in flight to an echo backend; replies per second and their latency. A window of 1 is request/response; one flow with a large window is a bulk stream'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand help; and not __fish_seen_subcommand_from source relay sweep short rpc nagle nagle-established lines idle sources idle-unix tls-short tls-burst tls-bulk udp-echo udp udp-idle bulk help" -f -a "udp-idle" -d 'Idle UDP flows: F sockets send one datagram each, wait for the reply, then hold (bench/udp.sh reads the proxy\'s memory meanwhile)'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand help; and not __fish_seen_subcommand_from source relay sweep short rpc nagle nagle-established lines idle sources idle-unix tls-short tls-burst tls-bulk udp-echo udp udp-idle bulk help" -f -a "bulk" -d 'Bulk download: C connections at once, each reading to EOF'
complete -c tcpmux-bench -n "__fish_tcpmux_bench_using_subcommand help; and not __fish_seen_subcommand_from source relay sweep short rpc nagle nagle-established lines idle sources idle-unix tls-short tls-burst tls-bulk udp-echo udp udp-idle bulk help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
