complete -c tcpmux -s H -l host -d 'Server host name or address' -r
complete -c tcpmux -s p -l port -d 'Server port (RFC 1078 assigns port 1)' -r
complete -c tcpmux -s U -l unix -d 'Connect to a server\'s Unix socket instead of TCP' -r -F
complete -c tcpmux -s t -l timeout -d 'Seconds allowed for connecting and for the server\'s reply' -r
complete -c tcpmux -l ca -d 'With --tls: PEM file of the CA the server\'s certificate must chain to (default: the system\'s trust store)' -r -F
complete -c tcpmux -l cert -d 'With --tls: PEM client certificate (chain) to present; needs --key' -r -F
complete -c tcpmux -l key -d 'With --tls: PEM private key of --cert' -r -F
complete -c tcpmux -l server-name -d 'With --tls: the name the server\'s certificate must carry (default: --host)' -r
complete -c tcpmux -s l -l list -d 'Print the server\'s service list (HELP) and exit'
complete -c tcpmux -s s -l stats -d 'Print connect time, negotiation time, bytes and MB/s on stderr at the end'
complete -c tcpmux -l fast-open -d 'TCP Fast Open: send the service name in the SYN (one round trip less; needs net.ipv4.tcp_fastopen on both ends, else a normal handshake)'
complete -c tcpmux -l tls -d 'Speak TLS first (a `tls` listener), then TCPMUX inside it'
complete -c tcpmux -s h -l help -d 'Print help'
complete -c tcpmux -s V -l version -d 'Print version'
