//! One connection to etcd, from joining to its end: a lease and this
//! instance's membership on it, what the fleet set (read once, then
//! watched), the lease kept alive, the membership refreshed, and the
//! operators' changes written. Every request has a deadline; a watch or a
//! keep-alive stream that ends, or a lease etcd no longer knows, ends it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, ConnectOptions, EventType, GetOptions, LeaseKeepAliveStream, LeaseKeeper, PutOptions,
    WatchOptions, WatchStream,
};
use tcpmux_proto::admin::{Scope, SetBy};
use tokio::sync::mpsc;

use super::acme::{Ack, FleetOrders};
use super::cache::Cache;
use super::deadline::{within, REQUEST_TIMEOUT};
use super::instance::Instance;
use super::keys::{self, Entry};
use super::tickets::TicketKeys;
use crate::model::clock::unix_seconds;
use crate::runtime::{self, Change, FleetLink, Member, Publish};
use crate::state::Shared;

/// How long a connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// The membership lease: an instance gone this long leaves `show fleet`.
const LEASE_TTL: i64 = 10;
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(3);
/// How often the membership's figures (live sessions) are refreshed.
const REPORT_EVERY: Duration = Duration::from_secs(5);
/// HTTP/2 pings on the connection, so that a watch on an etcd that went
/// away without a word ends.
const PING_EVERY: Duration = Duration::from_secs(5);

/// How a session ended.
pub(super) enum Ended {
    /// The daemon is stopping.
    Closed,
    /// It had joined; then this went wrong.
    Served(String),
    /// It never joined, for this reason.
    NotConnected(String),
}

/// A joined session's streams.
struct Joined {
    lease: i64,
    keeper: LeaseKeeper,
    alive: LeaseKeepAliveStream,
    watch: WatchStream,
    members: HashMap<String, Member>,
}

/// What a session works with: this instance, the daemon's shared state,
/// the link to the admin socket, and the ticket keys held across sessions.
pub(super) struct Context<'a> {
    pub instance: &'a Instance,
    pub shared: &'a Arc<Shared>,
    pub link: &'a FleetLink,
    pub tickets: &'a mut TicketKeys,
    pub orders: &'a FleetOrders,
    pub cache: &'a mut Cache,
}

pub(super) async fn serve(cx: &mut Context<'_>, publish: &mut mpsc::Receiver<Publish>) -> Ended {
    let (instance, link) = (cx.instance, cx.link);
    let mut client = match connect(instance).await {
        Ok(client) => client,
        Err(e) => return Ended::NotConnected(e),
    };
    let joined = match join(&mut client, cx).await {
        Ok(joined) => joined,
        Err(e) => return Ended::NotConnected(e),
    };
    let endpoints = instance.cluster.etcd.join(",");
    link.set_etcd(format!("connected to {endpoints}"));
    tracing::info!(node = %instance.cluster.node, etcd = %endpoints, members = joined.members.len(), "fleet: joined");
    cx.orders
        .set_connected(Some((client.clone(), joined.lease)));
    let followed = follow(&mut client, joined, cx, publish).await;
    cx.orders.set_connected(None);
    match followed {
        Ok(()) => Ended::Closed,
        Err(e) => Ended::Served(e),
    }
}

async fn connect(instance: &Instance) -> Result<Client, String> {
    let cluster = &instance.cluster;
    let mut options = ConnectOptions::new()
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_keep_alive(PING_EVERY, REQUEST_TIMEOUT)
        .with_keep_alive_while_idle(true)
        .with_require_leader(true);
    if let Some((user, password)) = &cluster.user {
        options = options.with_user(user.clone(), password.clone());
    }
    if let Some(tls) = &cluster.tls {
        let mut config = etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(&tls.ca));
        if let Some((cert, key)) = &tls.identity {
            config = config.identity(etcd_client::Identity::from_pem(cert, key));
        }
        options = options.with_tls(config);
    }
    let connecting = Client::connect(cluster.etcd.clone(), Some(options));
    match tokio::time::timeout(CONNECT_TIMEOUT + REQUEST_TIMEOUT, connecting).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(format!("connect: {e}")),
        Err(_) => Err("connect: no answer".into()),
    }
}

/// This instance's membership as it stands now.
fn membership(instance: &Instance, shared: &Shared) -> Member {
    Member {
        node: instance.cluster.node.clone(),
        address: instance.address.clone(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        started: instance.started,
        updated: unix_seconds(),
        sessions: shared.gate.active.get() as u64,
    }
}

/// A lease, the membership on it, the fleet's state read and put in
/// force, and a watch from just after what was read.
async fn join(client: &mut Client, cx: &mut Context<'_>) -> Result<Joined, String> {
    let (instance, shared, link) = (cx.instance, cx.shared, cx.link);
    let prefix = &instance.cluster.prefix;
    let lease = within("lease", client.lease_grant(LEASE_TTL, None))
        .await?
        .id();
    report(client, instance, shared, lease).await?;
    let all = format!("{prefix}/");
    let read = within(
        "read the fleet's state",
        client.get(all.clone(), Some(GetOptions::new().with_prefix())),
    )
    .await?;
    let revision = read.header().map_or(0, |h| h.revision());
    let mut members = HashMap::new();
    let mut acks = Vec::new();
    for kv in read.kvs() {
        if kept(cx, kv.key()) {
            cx.cache.keep(kv.key(), Some(kv.value()));
        }
        if cx.tickets.is_ours(kv.key()) {
            cx.tickets.take(kv.value(), kv.mod_revision(), &shared.keys);
        }
        acks.extend(cx.orders.watched(kv.key(), Some(kv.value()), &shared.keys));
        match keys::read(prefix, kv.key(), kv.value()) {
            Some(Entry::Node(member)) => {
                members.insert(member.node.clone(), member);
            }
            Some(Entry::Change(change, node)) => put_in_force(shared, &change, node, false),
            None => {}
        }
    }
    link.set_members(members.values().cloned().collect());
    cx.cache.save();
    if cx.tickets.due(unix_seconds()) {
        cx.tickets.rotate(client, unix_seconds()).await?;
    }
    for ack in acks {
        cx.orders.acknowledge(client, lease, ack).await?;
    }
    let watching = WatchOptions::new()
        .with_prefix()
        .with_start_revision(revision + 1);
    let watch = within("watch", client.watch(all, Some(watching))).await?;
    let (keeper, alive) = within("keep-alive", client.lease_keep_alive(lease)).await?;
    Ok(Joined {
        lease,
        keeper,
        alive,
        watch,
        members,
    })
}

/// Writes this instance's membership on `lease`.
async fn report(
    client: &mut Client,
    instance: &Instance,
    shared: &Shared,
    lease: i64,
) -> Result<(), String> {
    let member = membership(instance, shared);
    let key = keys::node_key(&instance.cluster.prefix, &member.node);
    let put = client.put(
        key,
        keys::node_value(&member),
        Some(PutOptions::new().with_lease(lease)),
    );
    within("membership", put).await.map(drop)
}

/// Until the daemon stops (`Ok`) or something fails.
async fn follow(
    client: &mut Client,
    mut joined: Joined,
    cx: &mut Context<'_>,
    publish: &mut mpsc::Receiver<Publish>,
) -> Result<(), String> {
    let instance = cx.instance;
    let mut keep_alive = tokio::time::interval(KEEP_ALIVE_EVERY);
    let mut refresh = tokio::time::interval(REPORT_EVERY);
    loop {
        tokio::select! {
            _ = keep_alive.tick() => {
                within("keep-alive", joined.keeper.keep_alive()).await?;
            }
            alive = joined.alive.message() => match alive {
                Ok(Some(answer)) if answer.ttl() > 0 => {}
                Ok(Some(_)) => return Err("the membership lease expired".into()),
                Ok(None) => return Err("etcd ended the keep-alive stream".into()),
                Err(e) => return Err(format!("keep-alive: {e}")),
            },
            _ = refresh.tick() => {
                report(client, instance, cx.shared, joined.lease).await?;
                if cx.tickets.due(unix_seconds()) {
                    cx.tickets.rotate(client, unix_seconds()).await?;
                }
            }
            watched = joined.watch.message() => match watched {
                Ok(Some(answer)) if answer.canceled() => {
                    return Err(format!("etcd canceled the watch: {}", answer.cancel_reason()));
                }
                Ok(Some(answer)) => {
                    let mut saved = false;
                    for event in answer.events() {
                        if let Some(kv) = event.kv().filter(|kv| kept(cx, kv.key())) {
                            let value = (event.event_type() == EventType::Put).then(|| kv.value());
                            cx.cache.keep(kv.key(), value);
                            saved = true;
                        }
                        if let Some(ack) = changed(cx, &mut joined.members, event) {
                            cx.orders.acknowledge(client, joined.lease, ack).await?;
                        }
                    }
                    cx.link.set_members(joined.members.values().cloned().collect());
                    if saved {
                        cx.cache.save();
                    }
                }
                Ok(None) => return Err("etcd ended the watch".into()),
                Err(e) => return Err(format!("watch: {e}")),
            },
            () = cx.link.added() => put_added_in_force(instance, cx.shared, cx.cache),
            asked = publish.recv() => {
                let Some(asked) = asked else { return Ok(()) };
                let key = keys::change_key(&instance.cluster.prefix, &asked.change);
                let value = keys::change_value(&asked.change, &instance.cluster.node);
                let written = within("write the change", client.put(key, value, None)).await;
                let failed = written.as_ref().err().cloned();
                let _ = asked.done.send(written.map(drop));
                if let Some(error) = failed {
                    return Err(error);
                }
            }
        }
    }
}

/// One watched event put in force: a member come or gone, a change, new
/// ticket keys, the fleet's certificate or challenge; a challenge answered
/// is to be acknowledged.
fn changed(
    cx: &mut Context<'_>,
    members: &mut HashMap<String, Member>,
    event: &etcd_client::Event,
) -> Option<Ack> {
    let prefix = &cx.instance.cluster.prefix;
    let kv = event.kv()?;
    let value = (event.event_type() == EventType::Put).then(|| kv.value());
    if let Some(ack) = cx.orders.watched(kv.key(), value, &cx.shared.keys) {
        return Some(ack);
    }
    match event.event_type() {
        EventType::Put if cx.tickets.is_ours(kv.key()) => {
            cx.tickets
                .take(kv.value(), kv.mod_revision(), &cx.shared.keys);
        }
        EventType::Put => match keys::read(prefix, kv.key(), kv.value()) {
            Some(Entry::Node(member)) => {
                members.insert(member.node.clone(), member);
            }
            Some(Entry::Change(change, node)) => put_in_force(cx.shared, &change, node, true),
            None => {}
        },
        EventType::Delete => {
            if let Some(node) = keys::deleted_node(prefix, kv.key()) {
                members.remove(&node);
            }
        }
    }
    None
}

/// Whether `key` is one the local copy keeps: a change or the ticket keys.
fn kept(cx: &Context<'_>, key: &[u8]) -> bool {
    let state = format!("{}/state/", cx.instance.cluster.prefix);
    key.starts_with(state.as_bytes()) || cx.tickets.is_ours(key)
}

/// Puts the fleet's changes kept in `cache` in force again, for the
/// services and members a reload or DNS gave this instance since they
/// came (a change for what it lacked was left then); what this instance's
/// operator set stays as it is.
pub(super) fn put_added_in_force(instance: &Instance, shared: &Shared, cache: &Cache) {
    let prefix = &instance.cluster.prefix;
    for (key, value) in cache.entries() {
        let Some(Entry::Change(change, node)) = keys::read(prefix, key.as_bytes(), value) else {
            continue;
        };
        let settings = shared.settings();
        if !runtime::set_here(&settings.registry, &settings.usage, &change) {
            put_in_force(shared, &change, node, false);
        }
    }
}

/// Puts a change the fleet holds in force here, as the fleet's and set by
/// `node`; one for a service or member this instance does not have is
/// left (its configuration may differ).
pub(super) fn put_in_force(shared: &Shared, change: &Change, node: String, log: bool) {
    let settings = shared.settings();
    let by = SetBy {
        node: node.clone(),
        scope: Scope::Fleet,
    };
    let made = shared
        .changes
        .apply(|| runtime::apply(&settings.registry, &settings.usage, change, Some(by)));
    match made {
        Ok(Ok(())) if log => {
            tracing::info!(set_by = %node, ?change, "fleet: run-time change put in force")
        }
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::debug!(set_by = %node, error = %e, "fleet: a change for what this instance does not have")
        }
        // A binary upgrade carries the state; the successor reads the
        // fleet's when it joins.
        Err(_frozen) => {}
    }
}
