//! The pool's balancing orders, health runs and passive ejection.

use super::*;
use crate::model::{Backend, Balance, RelayMode, Weighted};

fn proxy(balance: Balance, weights: &[u32]) -> Proxy {
    Proxy {
        backends: weights
            .iter()
            .enumerate()
            .map(|(i, &weight)| Weighted {
                backend: format!("127.0.0.1:{}", 1000 + i)
                    .parse::<Backend>()
                    .unwrap(),
                weight,
                max_connections: None,
            })
            .collect(),
        balance,
        hash_key: Default::default(),
        health_check: None,
        connect_timeout: Duration::from_secs(1),
        idle_timeout: None,
        send_proxy: None,
        relay: RelayMode::Splice,
        transparent: false,
        backend_tls: None,
    }
}

fn pool_for(proxy: &Proxy) -> (Pool, Arc<Members>) {
    let pool = Pool::default();
    pool.configure(&Arc::new(proxy.clone()));
    let members = pool.current(proxy).expect("IP backends are ready at once");
    (pool, members)
}

#[test]
fn round_robin_honours_weights_exactly_over_a_cycle() {
    let proxy = proxy(Balance::RoundRobin, &[1, 2, 3]);
    let (pool, members) = pool_for(&proxy);
    let mut firsts = [0; 3];
    for _ in 0..600 {
        firsts[pool.order_list(proxy.balance, &members, &[])[0]] += 1;
    }
    assert_eq!(firsts, [100, 200, 300]);
}

#[test]
fn least_connections_and_random_two_avoid_the_busy_backend() {
    for balance in [Balance::LeastConnections, Balance::RandomTwo] {
        let proxy = proxy(balance, &[1, 1]);
        let (pool, members) = pool_for(&proxy);
        let busy = &members.list[0].endpoint;
        let _busy: Vec<Held> = (0..5).map(|_| pool.hold(busy)).collect();
        for _ in 0..50 {
            let order = pool.order_list(balance, &members, &[]);
            // random-two may draw the busy one twice; then it is all it has.
            if balance == Balance::LeastConnections {
                assert_eq!(order[0], 1);
            }
            assert_eq!(order.len(), 2);
        }
    }
}

#[test]
fn least_connections_weighs_each_count_and_sends_ties_round() {
    // Weights 1, 3, 2,000: held 1, 2 and 0 at first.
    let proxy = proxy(Balance::LeastConnections, &[1, 3, 2000]);
    let (pool, members) = pool_for(&proxy);
    let hold = |i: usize| pool.hold(&members.list[i].endpoint);
    let _held = [hold(0), hold(1), hold(1)];
    let first = || pool.order_list(Balance::LeastConnections, &members, &[]);
    assert_eq!(first()[0], 2, "nothing held goes first");
    // 1 of 2,000 is less than 2 of 3 (in thousandths, 0 against 666).
    let _third = hold(2);
    assert_eq!(first()[0], 2);
    // 2 of 3 (0.67) is less than 1 of 1, and the failover follows by load.
    let _more = (0..2_000).map(|_| hold(2)).collect::<Vec<_>>();
    assert_eq!(first(), [1, 0, 2]);
    // Equal loads (1 of 1 against 3 of 3): the first pick goes round.
    let _fourth = hold(1);
    let firsts: std::collections::BTreeSet<usize> = (0..4).map(|_| first()[0]).collect();
    assert_eq!(firsts, [0, 1].into(), "ties go round");
}

#[test]
fn checks_take_a_backend_down_after_fall_and_up_after_rise() {
    let proxy = proxy(Balance::First, &[1, 1]);
    let (pool, members) = pool_for(&proxy);
    let order = || pool.order_list(Balance::First, &members, &[]);
    let a = &members.list[0].endpoint;
    pool.checked("s", a, false, 2, 2);
    assert_eq!(order(), [0, 1], "one failure is not enough");
    pool.checked("s", a, true, 2, 2);
    pool.checked("s", a, false, 2, 2);
    assert_eq!(order(), [0, 1], "a pass between resets the run");
    pool.checked("s", a, false, 2, 2);
    assert_eq!(order(), [1], "down after two in a row");
    pool.checked("s", a, true, 2, 2);
    assert_eq!(order(), [1]);
    pool.checked("s", a, true, 2, 2);
    assert_eq!(order(), [0, 1], "up after two passes");
    // Passive: three failed client connects eject it.
    for _ in 0..3 {
        pool.connect_failed("s", a);
    }
    assert_eq!(order(), [1]);
    // Still failing after the cool-down: out again after one more failure.
    let expire = |pool: &Pool| {
        let mut state = lock(&pool.state);
        let known = state.get_mut(a).and_then(|e| e.known.as_mut()).unwrap();
        known.health.ejected_until = Some(Instant::now() - Duration::from_millis(1));
        // The view would see the cool-down end at its time; here it ends early.
        drop(state);
        pool.changed();
    };
    expire(&pool);
    assert_eq!(order(), [0, 1], "tried again after the cool-down");
    pool.connect_failed("s", a);
    assert_eq!(order(), [1], "one more failure ejects it again");
    expire(&pool);
    pool.connected(a);
    let served = Relayed {
        backend_to_client: 5,
        ..Relayed::default()
    };
    pool.relayed("s", a, &served, false);
    assert_eq!(order(), [0, 1]);
    pool.connect_failed("s", a);
    assert_eq!(order(), [0, 1], "a session served starts the count over");
    // A backend that accepts and then quits before its first byte fails
    // its clients: three in a row eject it, though each connect worked.
    let quit = Relayed::default();
    pool.relayed("s", a, &served, false);
    for _ in 0..3 {
        pool.connected(a);
        pool.relayed("s", a, &quit, true);
    }
    assert_eq!(order(), [1], "ejected after three that quit");
}

fn member(port: u16, weight: u32, priority: u16) -> Member {
    Member {
        endpoint: Endpoint::Tcp(([127, 0, 0, 1], port).into()),
        weight,
        priority,
        max_connections: None,
    }
}

#[test]
fn the_best_srv_priority_is_balanced_and_the_rest_kept_for_failover() {
    let mut proxy = proxy(Balance::RoundRobin, &[1]);
    proxy.backends = vec![Weighted::one("srv:_x._tcp.test".parse().unwrap())];
    let pool = Pool::default();
    pool.configure(&Arc::new(proxy.clone()));
    assert!(
        pool.current(&proxy).is_none(),
        "not ready before DNS answers"
    );
    let list = vec![member(1, 1, 20), member(2, 1, 10), member(3, 3, 10)];
    assert!(pool.publish(&proxy, list));
    let members = pool.current(&proxy).unwrap();
    let mut firsts = [0; 3];
    for _ in 0..400 {
        let order = pool.order_list(Balance::RoundRobin, &members, &[]);
        assert_eq!(order.len(), 3);
        assert_eq!(order[2], 0, "priority 20 only after both of priority 10");
        firsts[order[0]] += 1;
    }
    assert_eq!(firsts, [0, 100, 300], "weights 1:3 within priority 10");
    // With priority 10 down, 20 takes the clients.
    for e in [1, 2] {
        for _ in 0..3 {
            pool.connect_failed("s", &members.list[e].endpoint);
        }
    }
    assert_eq!(pool.order_list(Balance::RoundRobin, &members, &[]), [0]);
    // A reload to other backends makes the old answers stale.
    let mut other = proxy.clone();
    other.backends = vec![Weighted::one("srv:_y._tcp.test".parse().unwrap())];
    pool.configure(&Arc::new(other));
    assert!(!pool.publish(&proxy, vec![member(1, 1, 0)]));
}

#[test]
fn a_member_dns_dropped_is_not_brought_back_by_its_last_sessions() {
    let mut proxy = proxy(Balance::RoundRobin, &[1]);
    proxy.backends = vec![Weighted::one("srv:_x._tcp.test".parse().unwrap())];
    let pool = Pool::default();
    pool.configure(&Arc::new(proxy.clone()));
    assert!(pool.publish(&proxy, vec![member(1, 1, 0), member(2, 1, 0)]));
    let gone = member(2, 1, 0).endpoint;
    pool.connected(&gone);
    assert!(pool.knows(&gone));
    // DNS no longer lists it; its sessions end and a check finishes after.
    assert!(pool.publish(&proxy, vec![member(1, 1, 0)]));
    assert!(!pool.knows(&gone));
    pool.connect_failed("s", &gone);
    pool.relayed("s", &gone, &Relayed::default(), true);
    pool.checked("s", &gone, false, 1, 1);
    assert!(
        !pool.knows(&gone),
        "an entry came back for a member that left"
    );
    let lines = pool.figures("s", &proxy);
    assert_eq!(lines.len(), 1, "{lines:?}");
}

#[test]
fn random_two_compares_two_different_members() {
    // Two members, one loaded: if both draws could land on the loaded one,
    // it would sometimes come first; two different draws always compare
    // it with the idle one.
    let proxy = Arc::new(proxy(Balance::RandomTwo, &[1, 1]));
    let pool = Pool::default();
    pool.configure(&proxy);
    let members = pool.current(&proxy).unwrap();
    let _busy = pool.hold(&members.list[0].endpoint);
    for _ in 0..1000 {
        assert_eq!(pool.order_list(Balance::RandomTwo, &members, &[]), [1, 0]);
    }
}

/// The view balancing reads is made again when an operator's weight or an
/// ejection's end changes it, and kept while only counts change.
#[test]
fn the_view_follows_weights_and_the_end_of_an_ejection() {
    let proxy = proxy(Balance::RoundRobin, &[1, 1]);
    let (pool, members) = pool_for(&proxy);
    let first = pool.view(&members);
    pool.connected(&members.list[0].endpoint);
    assert!(
        Arc::ptr_eq(&first, &pool.view(&members)),
        "a count alone keeps it"
    );
    pool.set_weight(&members.list[1].endpoint, Some(3), None);
    let mut firsts = [0; 2];
    for _ in 0..400 {
        firsts[pool.order_list(proxy.balance, &members, &[])[0]] += 1;
    }
    assert_eq!(firsts, [100, 300]);
    // Ejected until a moment from now: out, then back by the clock alone.
    let a = &members.list[0].endpoint;
    let back_at = Instant::now() + Duration::from_millis(50);
    {
        let mut state = lock(&pool.state);
        let entry = state.get_mut(a).and_then(|e| e.known.as_mut()).unwrap();
        entry.health.ejected_until = Some(back_at);
    }
    pool.changed();
    assert_eq!(pool.order_list(Balance::First, &members, &[]), [1]);
    while Instant::now() < back_at {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(pool.order_list(Balance::First, &members, &[]), [0, 1]);
}

#[test]
fn set_here_is_what_this_instances_operator_set_not_the_fleet() {
    use tcpmux_proto::admin::{Scope, SetBy};
    let proxy = proxy(Balance::RoundRobin, &[1, 1]);
    let (pool, members) = pool_for(&proxy);
    let endpoint = &members.list[0].endpoint;
    let by = |scope| {
        Some(SetBy {
            node: "a".into(),
            scope,
        })
    };
    assert!(!pool.set_here(endpoint), "nothing set");
    pool.set_state(endpoint, AdminState::Drain, by(Scope::Fleet));
    assert!(!pool.set_here(endpoint), "the fleet's");
    pool.set_state(endpoint, AdminState::Maint, by(Scope::Local));
    assert!(pool.set_here(endpoint), "--local");
    // Carried by an upgrade: who set it is not known, so it is kept.
    pool.set_weight(endpoint, Some(5), None);
    assert!(pool.set_here(endpoint), "setter unknown");
    // Back to the defaults: nothing set any more.
    pool.set_state(endpoint, AdminState::Ready, None);
    pool.set_weight(endpoint, None, None);
    assert!(!pool.set_here(endpoint));
    // Unless this instance's operator set them back over the fleet's word.
    pool.set_state(endpoint, AdminState::Drain, by(Scope::Fleet));
    pool.set_state(endpoint, AdminState::Ready, by(Scope::Local));
    assert!(pool.set_here(endpoint), "--local back to ready");
    assert_eq!(pool.override_of(endpoint), Override::default());
    pool.set_state(endpoint, AdminState::Ready, by(Scope::Fleet));
    assert!(!pool.set_here(endpoint), "the fleet's word again");
}
