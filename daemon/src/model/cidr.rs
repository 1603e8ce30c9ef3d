//! Address ranges in CIDR notation (`10.0.0.0/8`, `::1/128`, or a bare address),
//! for deciding which peers are trusted.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

#[derive(Debug, thiserror::Error)]
#[error("invalid address range {0:?}: expected e.g. 127.0.0.1/32, 10.0.0.0/8 or ::1/128")]
pub struct CidrError(String);

impl Cidr {
    pub fn contains(&self, ip: IpAddr) -> bool {
        // An IPv4 client on a dual-stack socket appears as ::ffff:a.b.c.d.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.network, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || CidrError(text.to_owned());
        let (address, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let network: IpAddr = address.parse().map_err(|_| error())?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= max)
                .ok_or_else(error)?,
            None => max,
        };
        Ok(Cidr { network, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn membership() {
        let lan: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(lan.contains(ip("10.1.200.3")));
        assert!(!lan.contains(ip("10.2.0.1")));
        assert!(lan.contains(ip("::ffff:10.1.0.9")));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.1")));
        assert!(!all.contains(ip("::1")));
        let one: Cidr = "::1".parse().unwrap();
        assert!(one.contains(ip("::1")) && !one.contains(ip("::2")));
    }

    #[test]
    fn rejects_nonsense() {
        for bad in ["10.0.0.0/33", "::/129", "example.org/8", "10.0.0.0/", ""] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }
}
