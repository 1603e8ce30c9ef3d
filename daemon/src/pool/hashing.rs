//! `balance = "source"`: weighted rendezvous hashing (highest random weight).
//! Every (client, member) pair gets a score from a fixed hash, scaled by the
//! member's weight; the client goes to the highest score and fails over down
//! the list. Adding or removing one of N members moves only the clients whose
//! best score it has or had: about 1/N of them, and no one else.

use crate::model::Endpoint;

/// A client's `sticky` key as the scores take it.
pub(crate) fn client_key(sticky: &[u8]) -> u64 {
    fnv(sticky)
}

/// A member's share of every score: its endpoint's hash, made once per
/// member, not once per client.
pub(crate) fn member_hash(endpoint: &Endpoint) -> u64 {
    mix(fnv(endpoint.to_string().as_bytes()))
}

/// A client's order of the members (the tests' `ranked`) with the key and
/// the members' hashes made already.
pub(crate) fn ranked_hashed(
    key: u64,
    hashes: &[u64],
    weights: &[u32],
    candidates: &[usize],
) -> Vec<usize> {
    let mut scored: Vec<(f64, usize)> = candidates
        .iter()
        .map(|&i| (score(key, hashes[i], weights[i]), i))
        .collect();
    // Highest first; ties (practically never) by index, so the order is fixed.
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().map(|(_, i)| i).collect()
}

/// The first of [`ranked_hashed`]'s order, without sorting the rest: one
/// multiply-and-shift per member when their weights are all `uniform` (the
/// score then rises with the hash alone, so no logarithm is needed).
pub(crate) fn best(
    key: u64,
    hashes: &[u64],
    weights: &[u32],
    candidates: &[usize],
    uniform: bool,
) -> Option<usize> {
    // Equal weights: the score rises with its 53 drawn bits alone (exact in
    // an f64), so ties fall as ranked's do and no logarithm is taken.
    let scored = |i: usize| match uniform {
        true => (mix(key ^ hashes[i]) >> 11) as f64,
        false => score(key, hashes[i], weights[i]),
    };
    let mut best: Option<(f64, usize)> = None;
    for &i in candidates {
        let s = scored(i);
        if best.map_or(true, |(b, j)| s > b || (s == b && i < j)) {
            best = Some((s, i));
        }
    }
    best.map(|(_, i)| i)
}

/// `weight / -ln(u)` for a uniform `u` in (0, 1) drawn from the pair's hash:
/// the weighted rendezvous score, so a member of weight 3 wins three times as
/// often as one of weight 1.
fn score(key: u64, member: u64, weight: u32) -> f64 {
    let h = mix(key ^ member);
    let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    f64::from(weight.max(1)) / -u.ln()
}

/// FNV-1a, 64 bits: fixed across builds and restarts, unlike std's hasher.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// splitmix64's finalizer: spreads FNV's low-entropy bits over all 64.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// The members `candidates` (indexes into `endpoints`/`weights`) in the order
    /// a client whose `sticky` key (its address's bytes, or its SNI) should try
    /// them. Clients with no key (Unix sockets) all hash alike.
    fn ranked(
        sticky: &[u8],
        endpoints: &[&Endpoint],
        weights: &[u32],
        candidates: &[usize],
    ) -> Vec<usize> {
        let hashes: Vec<u64> = endpoints.iter().map(|e| member_hash(e)).collect();
        ranked_hashed(client_key(sticky), &hashes, weights, candidates)
    }

    fn members(n: u16) -> Vec<Endpoint> {
        (0..n)
            .map(|i| Endpoint::Tcp(([10, 0, 0, 1], 8000 + i).into()))
            .collect()
    }

    fn clients() -> impl Iterator<Item = Ipv4Addr> {
        (0..20_000u32).map(|i| Ipv4Addr::from(0x0a00_0000 + i * 7919))
    }

    fn first(client: Ipv4Addr, list: &[Endpoint], weights: &[u32]) -> Endpoint {
        let refs: Vec<&Endpoint> = list.iter().collect();
        let all: Vec<usize> = (0..list.len()).collect();
        list[ranked(&client.octets(), &refs, weights, &all)[0]].clone()
    }

    /// With 10 members and one removed, only that member's clients move:
    /// about a tenth.
    #[test]
    fn removing_one_of_ten_moves_only_its_clients() {
        let all = members(10);
        let fewer: Vec<Endpoint> = all.iter().filter(|e| **e != all[3]).cloned().collect();
        let (w10, w9) = (vec![1; 10], vec![1; 9]);
        let mut moved = 0;
        for client in clients() {
            let before = first(client, &all, &w10);
            let after = first(client, &fewer, &w9);
            if before != after {
                assert_eq!(before, all[3], "{client} moved off a member still there");
                moved += 1;
            }
        }
        let share = f64::from(moved) / 20_000.0;
        assert!((0.08..0.12).contains(&share), "{share}");
    }

    #[test]
    fn weights_set_the_shares_and_the_list_is_a_failover_order() {
        let list = members(2);
        let on_heavy = clients()
            .filter(|&c| first(c, &list, &[1, 3]) == list[1])
            .count();
        let share = on_heavy as f64 / 20_000.0;
        assert!((0.72..0.78).contains(&share), "{share}");
        let refs: Vec<&Endpoint> = list.iter().collect();
        let order = ranked(&[], &refs, &[1, 1], &[0, 1]);
        assert_eq!(order.len(), 2);
        assert_eq!(order, ranked(&[], &refs, &[1, 1], &[0, 1]), "fixed");
    }

    /// The first choice made without sorting is ranked's first, with equal
    /// weights (no logarithm) and with different ones.
    #[test]
    fn best_is_the_first_of_the_ranking() {
        let list = members(50);
        let hashes: Vec<u64> = list.iter().map(member_hash).collect();
        let all: Vec<usize> = (0..list.len()).collect();
        let uneven: Vec<u32> = (0..50).map(|i| 1 + i % 7).collect();
        for client in clients().take(2_000) {
            let key = client_key(&client.octets());
            for (weights, uniform) in [(vec![1; 50], true), (uneven.clone(), false)] {
                let ranked = ranked_hashed(key, &hashes, &weights, &all);
                assert_eq!(best(key, &hashes, &weights, &all, uniform), Some(ranked[0]));
            }
        }
    }
}
