//! AES-256-GCM with a fresh random 96-bit nonce per value. Output: nonce || ciphertext+tag.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};

pub const NONCE_LEN: usize = 12;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("authenticated decryption failed")]
pub struct AeadError;

pub fn seal(key: &[u8; 32], aad: &[u8], plaintext: &[u8]) -> Result<Vec<u8>, AeadError> {
    let cipher = Aes256Gcm::new(key.into());
    let nonce: [u8; NONCE_LEN] = rand::random();
    let ct = cipher
        .encrypt(
            &Nonce::from(nonce),
            Payload {
                msg: plaintext,
                aad,
            },
        )
        .map_err(|_| AeadError)?;
    let mut out = Vec::with_capacity(NONCE_LEN + ct.len());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&ct);
    Ok(out)
}

pub fn open(key: &[u8; 32], aad: &[u8], sealed: &[u8]) -> Result<Vec<u8>, AeadError> {
    if sealed.len() < NONCE_LEN + 16 {
        return Err(AeadError);
    }
    let (nonce, ct) = sealed.split_at(NONCE_LEN);
    let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| AeadError)?;
    Aes256Gcm::new(key.into())
        .decrypt(&Nonce::from(nonce), Payload { msg: ct, aad })
        .map_err(|_| AeadError)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_binding() {
        let key = [7u8; 32];
        let sealed = seal(&key, b"aad-a", b"hello").unwrap();
        assert_eq!(open(&key, b"aad-a", &sealed).unwrap(), b"hello");
        assert_eq!(open(&key, b"aad-b", &sealed), Err(AeadError));
        assert_eq!(open(&[8u8; 32], b"aad-a", &sealed), Err(AeadError));
        let mut tampered = sealed.clone();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        assert_eq!(open(&key, b"aad-a", &tampered), Err(AeadError));
        assert_ne!(
            seal(&key, b"a", b"x").unwrap(),
            seal(&key, b"a", b"x").unwrap(),
            "fresh nonce"
        );
    }
}
