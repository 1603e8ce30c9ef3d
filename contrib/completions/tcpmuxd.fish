complete -c tcpmuxd -s c -l config -d 'TOML configuration file' -r -F
complete -c tcpmuxd -s l -l listen -d 'Address to listen on, replacing the configured ones; repeat for several. IP:PORT, [IPv6]:PORT, HOST:PORT (every address HOST resolves to) or unix:/path. Default: 0.0.0.0:1 (RFC 1078\'s port)' -r
complete -c tcpmuxd -s w -l workers -d 'Event loops to run, each a single thread with its own listening sockets (SO_REUSEPORT): the shared-nothing multi-core mode. 1 (the default) is the classic single event loop' -r
complete -c tcpmuxd -l check-config -d 'Check FILE and exit: 0 if it is valid, 1 with the error if not' -r -F
complete -c tcpmuxd -l log-format -d 'Log lines as `text` (key=value) or `json` (one object per line). Under journald each line also carries its syslog priority' -r -f -a "text\t'`time LEVEL target: message key=value ...`'
json\t'One JSON object per line'"
complete -c tcpmuxd -l upgrade -d 'Take over from the tcpmuxd running with the same configuration\'s `upgrade_socket`: receive its listening sockets, serve on them, then let it drain and exit. Runs in the foreground as the new daemon; exits 1 with the reason if it cannot take over'
complete -c tcpmuxd -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tcpmuxd -s V -l version -d 'Print version'
