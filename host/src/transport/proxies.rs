//! # Trusted proxies: whose address a request counts as
//!
//! Without credentials, an HTTP client is its address for the shares one client may hold
//! (2025-era sessions, `subscriptions/listen` streams, the admission bound). Behind a
//! reverse proxy every request comes from the proxy's address, so all such clients would
//! share one client's half. `[http] trusted_proxies` names the proxies (addresses or CIDR
//! blocks) whose `X-Forwarded-For` is believed: a request from one of them counts as the
//! last address in that header that is not itself a trusted proxy (read from the right,
//! since a client can put anything on the left: only what the proxies appended is
//! theirs). A request from anywhere else counts as its connection's address, whatever it
//! claims. Limits on connections (per address, in the header phase) stay with the
//! connection's own address: those are the proxy's.

use std::net::IpAddr;

use hyper::header::HeaderMap;

/// The proxies whose `X-Forwarded-For` names the client (none by default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    /// Each block's address, masked, and its prefix length.
    blocks: Vec<(IpAddr, u8)>,
}

impl TrustedProxies {
    /// Parse addresses (`10.0.0.7`, `::1`) and CIDR blocks (`10.0.0.0/8`, `fd00::/8`).
    ///
    /// # Errors
    ///
    /// The entry that is neither, and why.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, String> {
        let blocks = entries
            .iter()
            .map(|entry| {
                let entry = entry.as_ref();
                let bad = |why: &str| format!("{entry:?} is not an address or a CIDR block: {why}");
                let (address, prefix) = match entry.split_once('/') {
                    Some((address, prefix)) => (address, Some(prefix)),
                    None => (entry, None),
                };
                let address: IpAddr = address.trim().parse().map_err(|_| bad("no IP address"))?;
                let address = address.to_canonical();
                let bits = if address.is_ipv4() { 32 } else { 128 };
                let prefix = match prefix {
                    Some(prefix) => prefix.trim().parse::<u8>().ok().filter(|&prefix| prefix <= bits),
                    None => Some(bits),
                }
                .ok_or_else(|| bad(&format!("the prefix length must be 0 to {bits}")))?;
                if prefix == 0 {
                    return Err(bad("it would trust every client to name any address it likes"));
                }
                Ok((masked(address, prefix), prefix))
            })
            .collect::<Result<_, String>>()?;
        Ok(Self { blocks })
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Whether `address` is one of the trusted proxies.
    pub fn contains(&self, address: IpAddr) -> bool {
        let address = address.to_canonical();
        (self.blocks.iter())
            .any(|&(block, prefix)| block.is_ipv4() == address.is_ipv4() && masked(address, prefix) == block)
    }

    /// The address a request from `peer` with these `headers` counts as: `peer`, unless it
    /// is a trusted proxy; then the last address of `X-Forwarded-For` (all its fields, in
    /// order) that is not one, or the last one looked at when all are. An entry that is
    /// not an address (`unknown`, garbage, bytes that are not text) ends the walk at the
    /// hop that sent it; at most [`MAX_HOPS`] entries are read.
    ///
    /// A client whose own address is in a trusted block is believed too, so name the
    /// proxies' addresses, never a block the clients share.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let mut client = peer.to_canonical();
        if !self.contains(client) {
            return client;
        }
        let mut looked = 0;
        // Entry by entry, each read as text alone: a proxy that merges the client's field
        // with its own must not let a byte the client wrote hide the address it appended.
        'fields: for field in headers.get_all("x-forwarded-for").iter().rev() {
            for hop in field.as_bytes().rsplit(|&byte| byte == b',') {
                if looked == MAX_HOPS {
                    break 'fields;
                }
                looked += 1;
                let Some(address) = std::str::from_utf8(hop).ok().and_then(parse_hop) else { break 'fields };
                client = address;
                if !self.contains(address) {
                    break 'fields;
                }
            }
        }
        client
    }
}

/// The most `X-Forwarded-For` entries looked at: real chains are a few proxies long, and a
/// client could send thousands of entries naming a trusted proxy.
pub const MAX_HOPS: usize = 16;

/// One `X-Forwarded-For` entry: an address, perhaps with a port or in brackets
/// (`1.2.3.4:80`, `[2001:db8::1]:80`, `[2001:db8::1]`), as some proxies write it.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    let unbracketed = hop.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')).unwrap_or(hop);
    let address = (unbracketed.parse::<IpAddr>().ok())
        .or_else(|| Some(hop.parse::<std::net::SocketAddr>().ok()?.ip()))?;
    Some(address.to_canonical())
}

/// `address` with all but its first `prefix` bits cleared.
fn masked(address: IpAddr, prefix: u8) -> IpAddr {
    match address {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4((v4.to_bits() & mask).into())
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6((v6.to_bits() & mask).into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn forwarded(fields: &[&'static str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for field in fields {
            headers.append("x-forwarded-for", HeaderValue::from_static(field));
        }
        headers
    }

    #[test]
    fn blocks_are_parsed_and_matched_by_prefix() {
        let trusted =
            TrustedProxies::parse(&["10.0.0.0/8", "192.0.2.7", "fd00::/8", "::ffff:198.51.100.1"]).unwrap();
        for inside in ["10.200.3.4", "192.0.2.7", "fd12::1", "198.51.100.1", "::ffff:10.0.0.1"] {
            assert!(trusted.contains(ip(inside)), "{inside}");
        }
        for outside in ["11.0.0.1", "192.0.2.8", "fe80::1", "::1"] {
            assert!(!trusted.contains(ip(outside)), "{outside}");
        }
        assert!(TrustedProxies::parse(&["128.0.0.0/1"]).unwrap().contains(ip("203.0.113.1")));
        for bad in ["10.0.0.0/33", "fd00::/129", "proxy.internal", "10.0.0.0/", "", "0.0.0.0/0", "::/0"] {
            assert!(TrustedProxies::parse(&[bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_client_is_the_last_forwarded_address_that_is_not_a_trusted_proxy() {
        let trusted = TrustedProxies::parse(&["10.0.0.0/8"]).unwrap();
        let proxy = ip("10.0.0.2");
        let client = |fields: &[&'static str]| trusted.client(proxy, &forwarded(fields));
        assert_eq!(client(&["203.0.113.7"]), ip("203.0.113.7"));
        // What a client wrote on the left is not believed: the proxy appended the right.
        assert_eq!(client(&["198.51.100.1, 203.0.113.7"]), ip("203.0.113.7"));
        // Through two proxies, in two fields, with ports.
        assert_eq!(client(&["203.0.113.7:5000", "10.1.1.1"]), ip("203.0.113.7"));
        assert_eq!(client(&["[2001:db8::7]:443, 10.1.1.1"]), ip("2001:db8::7"));
        assert_eq!(client(&["[2001:db8::7]"]), ip("2001:db8::7"));
        // Every hop a proxy: the first of them.
        assert_eq!(client(&["10.9.9.9, 10.1.1.1"]), ip("10.9.9.9"));
        // Garbage stops the walk at the hop that sent it.
        assert_eq!(client(&["203.0.113.7, unknown, 10.1.1.1"]), ip("10.1.1.1"));
        assert_eq!(client(&["unknown"]), proxy);
        assert_eq!(client(&[]), proxy);
        // An entry that is not text ends the walk too, where it sits: merged into one
        // field before the address the proxy appended, it hides nothing.
        let mut headers = forwarded(&["203.0.113.7"]);
        headers.append("x-forwarded-for", HeaderValue::from_bytes(b"\xff").unwrap());
        assert_eq!(trusted.client(proxy, &headers), proxy);
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", HeaderValue::from_bytes(b"\xff, 203.0.113.7").unwrap());
        assert_eq!(trusted.client(proxy, &headers), ip("203.0.113.7"));
        // Past MAX_HOPS trusted entries, the walk stops at the last one looked at.
        let mut headers = HeaderMap::new();
        let many = format!("203.0.113.7{}", ", 10.0.0.1".repeat(MAX_HOPS));
        headers.insert("x-forwarded-for", HeaderValue::from_str(&many).unwrap());
        assert_eq!(trusted.client(proxy, &headers), ip("10.0.0.1"));
        // From anywhere else the header is ignored.
        let stranger = ip("203.0.113.50");
        assert_eq!(trusted.client(stranger, &forwarded(&["10.0.0.9"])), stranger);
        assert_eq!(TrustedProxies::default().client(proxy, &forwarded(&["203.0.113.7"])), proxy);
    }
}
