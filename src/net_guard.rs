//! The SSRF guard (link checks, `web-read`, MCP tools' `guarded_urls`): which addresses chatd may connect to on a
//! user's or model's behalf, and a DNS resolver for such HTTP clients that resolves, checks every address and hands the client only the
//! checked addresses (so the connection is pinned to what was checked; a name that resolves
//! to any forbidden address is refused as a whole).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Cloud metadata endpoints: never contacted, whatever `allow_private_targets` says.
const METADATA: [IpAddr; 3] = [
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254)),
];

#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error("refused: {0} is not a public address")]
    Blocked(IpAddr),
    #[error("name resolution failed: {0}")]
    Resolve(#[from] std::io::Error),
    #[error("the name resolved to no address")]
    NoAddress,
}

#[derive(Debug, Clone, Copy)]
pub struct Guard {
    pub allow_private: bool,
}

impl Guard {
    /// Whether a check may connect to `ip`.
    pub fn allows(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        !METADATA.contains(&ip) && (self.allow_private || is_public(ip))
    }

    /// Resolves `host` and checks every address; all must be allowed.
    pub async fn resolve(&self, host: &str) -> Result<Vec<SocketAddr>, GuardError> {
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, 0)).await?.collect();
        if addrs.is_empty() {
            return Err(GuardError::NoAddress);
        }
        if let Some(bad) = addrs.iter().find(|a| !self.allows(a.ip())) {
            return Err(GuardError::Blocked(bad.ip()));
        }
        Ok(addrs)
    }
}

/// The checker client's resolver: only guarded addresses reach the connector.
#[derive(Debug, Clone, Copy)]
pub struct GuardedResolver(pub Guard);

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let guard = self.0;
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs = guard.resolve(&host).await?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// True when `err` (or any error it wraps) is a guard refusal.
pub fn is_blocked(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if matches!(e.downcast_ref::<GuardError>(), Some(GuardError::Blocked(_))) {
            return true;
        }
        cur = e.source();
    }
    false
}

/// IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Globally routable unicast.
pub fn is_public(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0                                   // "this network"
        || a == 10                             // private
        || (a == 100 && (64..128).contains(&b)) // shared (CGNAT)
        || a == 127                            // loopback
        || (a == 169 && b == 254)              // link-local, metadata
        || (a == 172 && (16..32).contains(&b)) // private
        || (a == 192 && b == 0 && (c == 0 || c == 2)) // IETF protocol, documentation
        || (a == 192 && b == 168)              // private
        || (a == 198 && (b == 18 || b == 19))  // benchmarking
        || (a == 198 && b == 51 && c == 100)   // documentation
        || (a == 203 && b == 0 && c == 113)    // documentation
        || a >= 224) // multicast, reserved, broadcast
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    // NAT64 (64:ff9b::/96) and 6to4 (2002::/16) carry an IPv4 address: judge that one.
    if s[0] == 0x0064 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        return is_public_v4(Ipv4Addr::new(
            (s[6] >> 8) as u8,
            s[6] as u8,
            (s[7] >> 8) as u8,
            s[7] as u8,
        ));
    }
    if s[0] == 0x2002 {
        return is_public_v4(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    // Only global unicast (2000::/3), minus Teredo, benchmarking, ORCHID and documentation.
    (s[0] & 0xe000) == 0x2000
        && !(s[0] == 0x2001 && (s[1] == 0 || s[1] == 2 || (0x10..0x30).contains(&s[1])))
        && !(s[0] == 0x2001 && s[1] == 0x0db8)
        && s[0] != 0x3fff
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn private_and_special_addresses_are_refused() {
        let guard = Guard {
            allow_private: false,
        };
        for s in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd00:ec2::254",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
            "2001:db8::1",
        ] {
            assert!(!guard.allows(ip(s)), "{s} must be refused");
        }
    }

    #[test]
    fn public_addresses_are_allowed() {
        let guard = Guard {
            allow_private: false,
        };
        for s in [
            "1.1.1.1",
            "93.184.216.34",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            assert!(guard.allows(ip(s)), "{s} must be allowed");
        }
    }

    #[test]
    fn allowing_private_targets_never_allows_metadata() {
        let guard = Guard {
            allow_private: true,
        };
        assert!(guard.allows(ip("127.0.0.1")));
        assert!(guard.allows(ip("10.0.0.1")));
        assert!(!guard.allows(ip("169.254.169.254")));
        assert!(!guard.allows(ip("fd00:ec2::254")));
        assert!(!guard.allows(ip("::ffff:169.254.169.254")));
    }

    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_refused() {
        let guard = Guard {
            allow_private: false,
        };
        let err = guard.resolve("localhost").await.unwrap_err();
        assert!(matches!(err, GuardError::Blocked(_)), "{err}");
        assert!(is_blocked(&err));
    }
}
