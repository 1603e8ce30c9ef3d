//! Following backends through DNS: a backend named by host name becomes one
//! member per A/AAAA address, `srv:NAME` one per SRV record and address. Each
//! answer is asked again when its TTL runs out (within `dns_min_ttl` and
//! `dns_max_ttl`), so the pool follows the registry without a reload; a failed
//! lookup keeps the last good answer. One task per service, started by the
//! server for the configuration in force.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use hickory_resolver::config::{NameServerConfig, ResolveHosts, ResolverConfig};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::xfer::Protocol;
use hickory_resolver::{ResolveError, TokioResolver};

use super::Pool;
use crate::model::{Backend, Dns, Endpoint, Member, Proxy, Weighted};

/// A resolver for `dns`: /etc/resolv.conf's name servers, or `resolvers`;
/// /etc/hosts first either way, so `localhost:5432` needs no DNS server.
pub(crate) fn resolver(dns: &Dns) -> TokioResolver {
    let provider = TokioConnectionProvider::default();
    let mut builder = if dns.resolvers.is_empty() {
        TokioResolver::builder_tokio().unwrap_or_else(|error| {
            tracing::warn!(%error, "cannot read the system's resolver configuration; names resolve from /etc/hosts only (set `resolvers`)");
            TokioResolver::builder_with_config(ResolverConfig::new(), provider.clone())
        })
    } else {
        let mut config = ResolverConfig::new();
        for &addr in &dns.resolvers {
            config.add_name_server(NameServerConfig::new(addr, Protocol::Udp));
            config.add_name_server(NameServerConfig::new(addr, Protocol::Tcp));
        }
        TokioResolver::builder_with_config(config, provider)
    };
    let options = builder.options_mut();
    options.use_hosts_file = ResolveHosts::Always;
    options.positive_min_ttl = Some(dns.min_ttl);
    options.positive_max_ttl = Some(dns.max_ttl);
    options.negative_max_ttl = Some(dns.min_ttl);
    builder.build()
}

/// What one DNS-backed backend last resolved to.
#[derive(Default)]
struct Answer {
    members: Option<Vec<Member>>,
    due: Option<Instant>,
    failing: bool,
    /// SRV targets that did not resolve last time (warned about once).
    skipped: Vec<String>,
}

/// Looks up `proxy`'s DNS backends as their answers expire and publishes the
/// members to `pool`, until a reload gives the pool other backends; `found`
/// is called after members were published that another answer gave.
pub(crate) async fn follow(
    service: String,
    (proxy, pool): (Arc<Proxy>, Arc<Pool>),
    resolver: Arc<TokioResolver>,
    dns: Dns,
    found: impl Fn() + Send,
) {
    let mut answers: Vec<Answer> = proxy.backends.iter().map(|_| Answer::default()).collect();
    loop {
        let now = Instant::now();
        let mut changed = false;
        for (Weighted { backend, .. }, answer) in proxy.backends.iter().zip(&mut answers) {
            if backend.fixed().is_some() || answer.due.is_some_and(|due| due > now) {
                continue;
            }
            match lookup(&resolver, backend, &mut answer.skipped).await {
                Ok((members, valid_until)) => {
                    let ttl = valid_until
                        .saturating_duration_since(now)
                        .clamp(dns.min_ttl, dns.max_ttl);
                    if answer.members.as_ref() != Some(&members) {
                        changed = true;
                        let list: Vec<String> =
                            members.iter().map(|m| m.endpoint.to_string()).collect();
                        tracing::info!(service, %backend, members = list.join(" "), ?ttl, "DNS answer");
                    } else if answer.failing {
                        tracing::info!(service, %backend, "DNS lookups answer again");
                    }
                    answer.members = Some(members);
                    answer.due = Some(now + ttl);
                    answer.failing = false;
                }
                Err(error) => {
                    if !answer.failing {
                        tracing::warn!(service, %backend, %error, "DNS lookup failed; keeping the last answer until one succeeds");
                    }
                    answer.failing = true;
                    answer.due = Some(now + dns.min_ttl);
                }
            }
        }
        if !pool.publish(&proxy, members(&proxy, &answers)) {
            return;
        }
        if changed {
            found();
        }
        let next = answers.iter().filter_map(|a| a.due).min();
        match next {
            Some(due) => tokio::time::sleep_until(due.into()).await,
            None => return,
        }
    }
}

/// The pool in configured order: fixed backends as they are, DNS ones as
/// last answered (none, before a first answer).
fn members(proxy: &Proxy, answers: &[Answer]) -> Vec<Member> {
    let mut list = Vec::new();
    for (entry, answer) in proxy.backends.iter().zip(answers) {
        match entry.fixed_member() {
            Some(member) => list.push(member),
            None => list.extend(answer.members.iter().flatten().map(|m| Member {
                weight: m.weight * entry.weight,
                ..m.clone()
            })),
        }
    }
    list
}

/// The members `backend` resolves to now, and until when the answer stands.
async fn lookup(
    resolver: &TokioResolver,
    backend: &Backend,
    skipped: &mut Vec<String>,
) -> Result<(Vec<Member>, Instant), ResolveError> {
    match backend {
        Backend::Tcp { host, port } => {
            let (addrs, until) = addresses(resolver, host, *port).await?;
            let members = addrs
                .into_iter()
                .map(|addr| Member {
                    endpoint: Endpoint::Tcp(addr),
                    weight: 1,
                    priority: 0,
                    max_connections: None,
                })
                .collect();
            Ok((members, until))
        }
        Backend::Srv(name) => srv(resolver, name, skipped).await,
        // Never looked up: a socket path is its own member (`fixed_member`).
        Backend::Unix(_) => Ok((Vec::new(), Instant::now())),
    }
}

/// `host`'s addresses with `port`, sorted so that equal answers compare equal.
async fn addresses(
    resolver: &TokioResolver,
    host: &str,
    port: u16,
) -> Result<(Vec<SocketAddr>, Instant), ResolveError> {
    let found = resolver.lookup_ip(host).await?;
    let mut addrs: Vec<SocketAddr> = found.iter().map(|ip| SocketAddr::new(ip, port)).collect();
    addrs.sort();
    addrs.dedup();
    Ok((addrs, found.valid_until()))
}

/// An SRV name's records, each target's addresses a member with the record's
/// priority and weight (a weight of 0 counts as 1, so it still gets clients).
/// A target that does not resolve is left out, with a warning naming it the
/// first time, so one bad record cannot take the service down; only when no
/// target resolves does the lookup fail (and the last answer stand).
async fn srv(
    resolver: &TokioResolver,
    name: &str,
    skipped: &mut Vec<String>,
) -> Result<(Vec<Member>, Instant), ResolveError> {
    let records = resolver.srv_lookup(name).await?;
    let mut until = records.as_lookup().valid_until();
    let mut members = Vec::new();
    let mut failed = Vec::new();
    for record in records.iter() {
        // A target of "." says the service is not offered there (RFC 2782).
        if record.target().is_root() {
            continue;
        }
        let target = record.target().to_ascii();
        let (addrs, valid) = match addresses(resolver, &target, record.port()).await {
            Ok(found) => found,
            Err(error) => {
                if !skipped.contains(&target) {
                    tracing::warn!(srv = name, %target, %error, "SRV target does not resolve; left out of the pool");
                }
                failed.push(target);
                continue;
            }
        };
        until = until.min(valid);
        members.extend(addrs.into_iter().map(|addr| Member {
            endpoint: Endpoint::Tcp(addr),
            weight: u32::from(record.weight().max(1)),
            priority: record.priority(),
            max_connections: None,
        }));
    }
    *skipped = failed;
    if members.is_empty() && !skipped.is_empty() {
        return Err(format!("no SRV target resolves ({})", skipped.join(", ")).into());
    }
    members.sort_by(|a, b| (a.priority, &a.endpoint).cmp(&(b.priority, &b.endpoint)));
    Ok((members, until))
}
