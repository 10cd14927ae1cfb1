//! JWT validation for OAUTHBEARER, as Kafka's broker validates access tokens
//! (`BrokerJwtValidator`, KIP-768, on jose4j): a JWS in compact form, signed by a key from a
//! JWKS (RFC 7517) the operator supplies, with `exp` and `iat` required, `nbf` honoured, the
//! issuer and audience checked when configured, and the principal taken from the `sub`
//! claim (or the one `sasl_oauthbearer_sub_claim_name` names).
//!
//! Signatures are checked by `ring` (already in the build for rustls): RS256/384/512,
//! PS256/384/512, ES256, ES384 and EdDSA (Ed25519). `none` and the HMAC algorithms are
//! refused, as Kafka refuses them with a JWKS (jose4j's `DISALLOW_NONE`, and a JWKS holds
//! no shared secrets). Nothing here reads a file or a clock: the JWKS text and "now" are
//! passed in. Every failure is a typed `JwtError` whose message never contains the token.
use base64::alphabet::URL_SAFE;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde_json::{Map, Value};
use thiserror::Error;

use crate::limits::OAUTHBEARER_JWKS_KEYS_MAX;

/// Base64url as JOSE writes it (no padding), accepting padding too in a JWKS: some JWKS
/// writers add it, and it changes nothing about the bytes.
const B64URL: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Why a token (or a JWKS) was refused. For the broker's log; the client only ever learns
/// `invalid_token` (Kafka's answer).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum JwtError {
    #[error("malformed JWT: {0}")]
    Malformed(&'static str),
    #[error("JWS algorithm `{0}` is not accepted")]
    Algorithm(String),
    #[error("JWS header has a `crit` parameter, which is not supported")]
    Critical,
    #[error("no key in the JWKS for algorithm {alg} and key id {kid:?}")]
    NoKey { alg: String, kid: Option<String> },
    #[error("signature does not verify with any matching JWKS key")]
    BadSignature,
    #[error("claim `{0}` is missing")]
    MissingClaim(String),
    #[error("claim `{claim}` is malformed: {why}")]
    BadClaim { claim: String, why: &'static str },
    #[error("token expired at {exp} (now {now}, clock skew {skew_s} s)")]
    Expired { exp: i64, now: i64, skew_s: i64 },
    #[error("token not valid before {nbf} (now {now}, clock skew {skew_s} s)")]
    NotYetValid { nbf: i64, now: i64, skew_s: i64 },
    #[error("issuer {found:?} is not the expected {expected:?}")]
    Issuer {
        expected: String,
        found: Option<String>,
    },
    #[error("audience {found:?} contains none of the expected {expected:?}")]
    Audience {
        expected: Vec<String>,
        found: Vec<String>,
    },
    #[error("JWKS: {0}")]
    Jwks(String),
    #[error("OAUTHBEARER is not configured (sasl_oauthbearer_jwks_endpoint_url)")]
    NotConfigured,
}

/// One verification key of a JWKS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Jwk {
    pub kid: Option<String>,
    /// The JWK's own `alg`, when it names one: only that algorithm may use it.
    pub alg: Option<String>,
    pub key: PublicKey,
}

/// The public key material of a JWK, as `ring` takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublicKey {
    /// Modulus and exponent, big-endian, leading zeros stripped.
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// An uncompressed point (0x04 || x || y) on P-256.
    P256(Vec<u8>),
    /// An uncompressed point on P-384.
    P384(Vec<u8>),
    Ed25519(Vec<u8>),
}

/// The JWS algorithms accepted, and how each verifies.
#[derive(Clone, Copy)]
enum Alg {
    Rs(&'static signature::RsaParameters),
    Ps(&'static signature::RsaParameters),
    Es256,
    Es384,
    EdDsa,
}

impl Alg {
    fn from_name(name: &str) -> Option<Alg> {
        Some(match name {
            "RS256" => Alg::Rs(&signature::RSA_PKCS1_2048_8192_SHA256),
            "RS384" => Alg::Rs(&signature::RSA_PKCS1_2048_8192_SHA384),
            "RS512" => Alg::Rs(&signature::RSA_PKCS1_2048_8192_SHA512),
            "PS256" => Alg::Ps(&signature::RSA_PSS_2048_8192_SHA256),
            "PS384" => Alg::Ps(&signature::RSA_PSS_2048_8192_SHA384),
            "PS512" => Alg::Ps(&signature::RSA_PSS_2048_8192_SHA512),
            "ES256" => Alg::Es256,
            "ES384" => Alg::Es384,
            "EdDSA" => Alg::EdDsa,
            _ => return None,
        })
    }

    fn verify(self, key: &PublicKey, message: &[u8], sig: &[u8]) -> bool {
        match (self, key) {
            (Alg::Rs(params) | Alg::Ps(params), PublicKey::Rsa { n, e }) => {
                RsaPublicKeyComponents { n, e }
                    .verify(params, message, sig)
                    .is_ok()
            }
            (Alg::Es256, PublicKey::P256(point)) => {
                UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(message, sig)
                    .is_ok()
            }
            (Alg::Es384, PublicKey::P384(point)) => {
                UnparsedPublicKey::new(&signature::ECDSA_P384_SHA384_FIXED, point)
                    .verify(message, sig)
                    .is_ok()
            }
            (Alg::EdDsa, PublicKey::Ed25519(x)) => UnparsedPublicKey::new(&signature::ED25519, x)
                .verify(message, sig)
                .is_ok(),
            _ => false,
        }
    }
}

/// A parsed JWKS: the keys that can verify signatures. Keys of other types, curves or uses
/// are skipped (a JWKS may hold encryption keys), as jose4j's key selector skips them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Jwks {
    pub keys: Vec<Jwk>,
}

impl Jwks {
    /// Parses a JWKS document (`{"keys":[...]}`).
    pub fn parse(text: &[u8]) -> Result<Jwks, JwtError> {
        let doc: Value =
            serde_json::from_slice(text).map_err(|e| JwtError::Jwks(format!("not JSON: {e}")))?;
        let keys = doc
            .get("keys")
            .and_then(Value::as_array)
            .ok_or_else(|| JwtError::Jwks("no `keys` array".into()))?;
        if keys.len() > OAUTHBEARER_JWKS_KEYS_MAX {
            return Err(JwtError::Jwks(format!(
                "{} keys, more than {OAUTHBEARER_JWKS_KEYS_MAX}",
                keys.len()
            )));
        }
        let mut out = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let Some(obj) = key.as_object() else {
                return Err(JwtError::Jwks(format!("key {i} is not an object")));
            };
            if obj
                .get("use")
                .and_then(Value::as_str)
                .is_some_and(|u| u != "sig")
            {
                continue;
            }
            let material = match public_key(obj) {
                Ok(Some(k)) => k,
                Ok(None) => continue,
                Err(why) => return Err(JwtError::Jwks(format!("key {i}: {why}"))),
            };
            out.push(Jwk {
                kid: obj.get("kid").and_then(Value::as_str).map(str::to_string),
                alg: obj.get("alg").and_then(Value::as_str).map(str::to_string),
                key: material,
            });
        }
        if out.is_empty() {
            return Err(JwtError::Jwks("no signature verification key".into()));
        }
        Ok(Jwks { keys: out })
    }
}

fn b64_field(obj: &Map<String, Value>, name: &'static str) -> Result<Vec<u8>, String> {
    let text = obj
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("no `{name}`"))?;
    B64URL
        .decode(text)
        .map_err(|_| format!("`{name}` is not base64url"))
}

/// The key material of one JWK; `None` for a type or curve that cannot verify what is
/// accepted here (skipped, not an error).
fn public_key(obj: &Map<String, Value>) -> Result<Option<PublicKey>, String> {
    let kty = obj.get("kty").and_then(Value::as_str).unwrap_or("");
    match kty {
        "RSA" => {
            let strip = |v: Vec<u8>| {
                let first = v.iter().position(|b| *b != 0).unwrap_or(v.len());
                v.get(first..).map(<[u8]>::to_vec).unwrap_or_default()
            };
            let n = strip(b64_field(obj, "n")?);
            let e = strip(b64_field(obj, "e")?);
            if n.is_empty() || e.is_empty() {
                return Err("empty RSA modulus or exponent".into());
            }
            Ok(Some(PublicKey::Rsa { n, e }))
        }
        "EC" => {
            let (len, make): (usize, fn(Vec<u8>) -> PublicKey) =
                match obj.get("crv").and_then(Value::as_str) {
                    Some("P-256") => (32, PublicKey::P256),
                    Some("P-384") => (48, PublicKey::P384),
                    _ => return Ok(None),
                };
            let x = b64_field(obj, "x")?;
            let y = b64_field(obj, "y")?;
            if x.len() != len || y.len() != len {
                return Err(format!("EC coordinates must be {len} bytes"));
            }
            let mut point = Vec::with_capacity(1 + 2 * len);
            point.push(0x04);
            point.extend_from_slice(&x);
            point.extend_from_slice(&y);
            Ok(Some(make(point)))
        }
        "OKP" => {
            if obj.get("crv").and_then(Value::as_str) != Some("Ed25519") {
                return Ok(None);
            }
            let x = b64_field(obj, "x")?;
            if x.len() != 32 {
                return Err("Ed25519 key must be 32 bytes".into());
            }
            Ok(Some(PublicKey::Ed25519(x)))
        }
        _ => Ok(None),
    }
}

/// What a token is checked against (Kafka's `sasl.oauthbearer.*` settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatorSettings {
    /// `sasl.oauthbearer.expected.issuer`: when set, `iss` must equal it.
    pub expected_issuer: Option<String>,
    /// `sasl.oauthbearer.expected.audience`: when set, `aud` must hold one of them; when
    /// empty, a token that has an `aud` is refused (jose4j's default audience check, which
    /// Kafka keeps).
    pub expected_audience: Vec<String>,
    /// `sasl.oauthbearer.sub.claim.name` (default `sub`): the claim naming the principal.
    pub sub_claim_name: String,
    /// `sasl.oauthbearer.scope.claim.name` (default `scope`).
    pub scope_claim_name: String,
    /// `sasl.oauthbearer.clock.skew.seconds` (default 30): leeway for exp and nbf.
    pub clock_skew_s: i64,
}

impl Default for ValidatorSettings {
    fn default() -> Self {
        Self {
            expected_issuer: None,
            expected_audience: Vec::new(),
            sub_claim_name: "sub".into(),
            scope_claim_name: "scope".into(),
            clock_skew_s: 30,
        }
    }
}

/// A token that passed: who it names and until when it is good.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidToken {
    /// The principal's name (the sub claim, trimmed).
    pub principal: String,
    /// `exp`, in milliseconds since the epoch.
    pub expires_at_ms: i64,
    /// How long from the validation's "now" until `exp` (negative within the clock skew).
    pub lifetime_ms: i64,
    /// `iat`, in milliseconds since the epoch.
    pub issued_at_ms: i64,
    pub scopes: Vec<String>,
}

/// Validates tokens against one JWKS and one set of settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtValidator {
    pub jwks: Jwks,
    pub settings: ValidatorSettings,
}

/// A token's sections are strict base64url (RFC 7515: no padding, canonical), so one
/// token has one spelling.
fn decode_part(part: &str, what: &'static str) -> Result<Vec<u8>, JwtError> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| JwtError::Malformed(what))
}

fn json_object(bytes: &[u8], what: &'static str) -> Result<Map<String, Value>, JwtError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(JwtError::Malformed(what)),
    }
}

/// A NumericDate claim (seconds since the epoch; jose4j truncates fractions), if present.
fn numeric_date(claims: &Map<String, Value>, name: &str) -> Result<Option<i64>, JwtError> {
    match claims.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            // A fraction or a huge value: truncated and clamped, as a long would hold it.
            .or_else(|| n.as_f64().map(|f| f as i64))
            .map(Some)
            .ok_or_else(|| JwtError::BadClaim {
                claim: name.to_string(),
                why: "not a number",
            }),
        Some(_) => Err(JwtError::BadClaim {
            claim: name.to_string(),
            why: "not a NumericDate",
        }),
    }
}

impl JwtValidator {
    pub fn new(jwks: Jwks, settings: ValidatorSettings) -> Self {
        Self { jwks, settings }
    }

    /// Validates a compact JWS at `now_ms` (milliseconds since the epoch).
    pub fn validate(&self, token: &str, now_ms: i64) -> Result<ValidToken, JwtError> {
        let mut parts = token.split('.');
        let (Some(h), Some(p), Some(s), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(JwtError::Malformed(
                "expected three sections (header, payload, and signature)",
            ));
        };
        if h.is_empty() || p.is_empty() {
            return Err(JwtError::Malformed("empty header or payload"));
        }
        let header = json_object(
            &decode_part(h, "header is not base64url")?,
            "header is not a JSON object",
        )?;
        let alg_name = header
            .get("alg")
            .and_then(Value::as_str)
            .ok_or(JwtError::Malformed("header has no `alg`"))?;
        let alg =
            Alg::from_name(alg_name).ok_or_else(|| JwtError::Algorithm(alg_name.to_string()))?;
        if header.contains_key("crit") {
            return Err(JwtError::Critical);
        }
        let kid = header.get("kid").and_then(Value::as_str);
        let sig = decode_part(s, "signature is not base64url")?;
        // The signing input is the first two sections exactly as sent.
        let signed_len = h.len() + 1 + p.len();
        let message = token
            .as_bytes()
            .get(..signed_len)
            .ok_or(JwtError::Malformed("truncated"))?;
        let candidates: Vec<&Jwk> = self
            .jwks
            .keys
            .iter()
            .filter(|k| kid.is_none() || k.kid.as_deref() == kid)
            .filter(|k| k.alg.as_deref().is_none_or(|a| a == alg_name))
            .collect();
        if candidates.is_empty() {
            return Err(JwtError::NoKey {
                alg: alg_name.to_string(),
                kid: kid.map(str::to_string),
            });
        }
        if !candidates.iter().any(|k| alg.verify(&k.key, message, &sig)) {
            return Err(JwtError::BadSignature);
        }
        // Only now is the payload trusted enough to read.
        let claims = json_object(
            &decode_part(p, "payload is not base64url")?,
            "payload is not a JSON object",
        )?;
        self.check_claims(&claims, now_ms)
    }

    fn check_claims(
        &self,
        claims: &Map<String, Value>,
        now_ms: i64,
    ) -> Result<ValidToken, JwtError> {
        let s = &self.settings;
        let now = now_ms.div_euclid(1000);
        let skew = s.clock_skew_s;
        let exp =
            numeric_date(claims, "exp")?.ok_or_else(|| JwtError::MissingClaim("exp".into()))?;
        // jose4j: expired when now - skew >= exp.
        if now.saturating_sub(skew) >= exp {
            return Err(JwtError::Expired {
                exp,
                now,
                skew_s: skew,
            });
        }
        if let Some(nbf) = numeric_date(claims, "nbf")? {
            if now.saturating_add(skew) < nbf {
                return Err(JwtError::NotYetValid {
                    nbf,
                    now,
                    skew_s: skew,
                });
            }
        }
        let iat =
            numeric_date(claims, "iat")?.ok_or_else(|| JwtError::MissingClaim("iat".into()))?;
        if exp < 0 || iat < 0 {
            return Err(JwtError::BadClaim {
                claim: if exp < 0 { "exp" } else { "iat" }.into(),
                why: "negative",
            });
        }
        if let Some(expected) = &s.expected_issuer {
            let found = claims.get("iss").and_then(Value::as_str);
            if found != Some(expected.as_str()) {
                return Err(JwtError::Issuer {
                    expected: expected.clone(),
                    found: found.map(str::to_string),
                });
            }
        }
        let audience: Vec<String> = match claims.get("aud") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(a)) => vec![a.clone()],
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| JwtError::BadClaim {
                    claim: "aud".into(),
                    why: "not a string or an array of strings",
                })?,
            Some(_) => {
                return Err(JwtError::BadClaim {
                    claim: "aud".into(),
                    why: "not a string or an array of strings",
                })
            }
        };
        let audience_required = !s.expected_audience.is_empty();
        if (audience_required || !audience.is_empty())
            && !audience.iter().any(|a| s.expected_audience.contains(a))
        {
            return Err(JwtError::Audience {
                expected: s.expected_audience.clone(),
                found: audience,
            });
        }
        let principal = match claims.get(&s.sub_claim_name) {
            None | Some(Value::Null) => {
                return Err(JwtError::MissingClaim(s.sub_claim_name.clone()))
            }
            Some(Value::String(v)) if !v.trim().is_empty() => v.trim().to_string(),
            Some(Value::String(_)) => {
                return Err(JwtError::BadClaim {
                    claim: s.sub_claim_name.clone(),
                    why: "empty",
                })
            }
            Some(_) => {
                return Err(JwtError::BadClaim {
                    claim: s.sub_claim_name.clone(),
                    why: "not a string",
                })
            }
        };
        let scopes = scopes(claims.get(&s.scope_claim_name), &s.scope_claim_name)?;
        Ok(ValidToken {
            principal,
            expires_at_ms: exp.saturating_mul(1000),
            lifetime_ms: exp.saturating_mul(1000).saturating_sub(now_ms),
            issued_at_ms: iat.saturating_mul(1000),
            scopes,
        })
    }
}

/// The scope claim as Kafka reads it: a string is one scope, an array a list of them, anything
/// else none; each must be non-empty and unique.
fn scopes(raw: Option<&Value>, claim: &str) -> Result<Vec<String>, JwtError> {
    let items: Vec<&Value> = match raw {
        Some(v @ Value::String(_)) => vec![v],
        Some(Value::Array(a)) => a.iter().collect(),
        _ => return Ok(Vec::new()),
    };
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let scope = item.as_str().map(str::trim).unwrap_or("");
        if scope.is_empty() {
            return Err(JwtError::BadClaim {
                claim: claim.to_string(),
                why: "a scope is empty or not a string",
            });
        }
        if out.iter().any(|s| s == scope) {
            return Err(JwtError::BadClaim {
                claim: claim.to_string(),
                why: "duplicate scopes",
            });
        }
        out.push(scope.to_string());
    }
    Ok(out)
}

/// "Now" for `fuzz`: tokens and claims are judged at this fixed time (2027-01-15).
pub const FUZZ_NOW_MS: i64 = 1_800_000_000_000;

/// A validator for fuzzing: one Ed25519 and one RSA key (fixed bytes, no private half
/// anywhere: no fuzz input can carry a valid signature), an expected issuer and audience.
pub fn fuzz_validator() -> &'static JwtValidator {
    static VALIDATOR: std::sync::OnceLock<JwtValidator> = std::sync::OnceLock::new();
    VALIDATOR.get_or_init(|| {
        let mut n = vec![0xC5; 256];
        if let Some(last) = n.last_mut() {
            *last = 0x01;
        }
        JwtValidator::new(
            Jwks {
                keys: vec![
                    Jwk {
                        kid: Some("ed".into()),
                        alg: None,
                        key: PublicKey::Ed25519(vec![0x11; 32]),
                    },
                    Jwk {
                        kid: None,
                        alg: Some("RS256".into()),
                        key: PublicKey::Rsa {
                            n,
                            e: vec![1, 0, 1],
                        },
                    },
                ],
            },
            ValidatorSettings {
                expected_issuer: Some("iss".into()),
                expected_audience: vec!["aud".into()],
                ..ValidatorSettings::default()
            },
        )
    })
}

/// Runs `data` through the JWKS parser, the JWS parser (as a compact token) and the claim
/// checks (as a claims object, as if its signature had verified). For the fuzz target and
/// the property tests: nothing may panic.
pub fn fuzz(data: &[u8]) {
    let _ = Jwks::parse(data);
    let v = fuzz_validator();
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = v.validate(text, FUZZ_NOW_MS);
    }
    if let Ok(claims) = json_object(data, "fuzz") {
        let _ = v.check_claims(&claims, FUZZ_NOW_MS);
        let _ = v.check_claims(&claims, i64::MIN);
        let _ = v.check_claims(&claims, i64::MAX);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair, RsaKeyPair};

    /// Signing keys for the tests: ECDSA P-256 and Ed25519 are generated by ring; RSA keys
    /// cannot be (ring only signs with them), so one fixed 2048-bit PKCS#8 key is embedded.
    pub struct Signer {
        pub es256: EcdsaKeyPair,
        pub ed25519: Ed25519KeyPair,
        pub rsa: RsaKeyPair,
    }

    /// A 2048-bit RSA key (PKCS#8 DER, base64), made with `openssl genpkey` and `openssl pkcs8
    /// -topk8` (genpkey alone writes PKCS#1 as DER) for these tests only.
    const RSA_PKCS8_B64: &str = include_str!("testdata/rsa2048.pk8.b64");

    impl Signer {
        pub fn new() -> Signer {
            let rng = SystemRandom::new();
            let pk8 =
                EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                    .unwrap();
            let es256 = EcdsaKeyPair::from_pkcs8(
                &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                pk8.as_ref(),
                &rng,
            )
            .unwrap();
            let pk8 = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
            let ed25519 = Ed25519KeyPair::from_pkcs8(pk8.as_ref()).unwrap();
            let der = base64::engine::general_purpose::STANDARD
                .decode(RSA_PKCS8_B64.split_whitespace().collect::<String>())
                .unwrap();
            let rsa = RsaKeyPair::from_pkcs8(&der).unwrap();
            Signer {
                es256,
                ed25519,
                rsa,
            }
        }

        /// The JWKS holding the three public keys, kids `rsa`, `ec`, `ed`.
        pub fn jwks(&self) -> Jwks {
            let rsa = self.rsa_components();
            Jwks {
                keys: vec![
                    Jwk {
                        kid: Some("rsa".into()),
                        alg: None,
                        key: PublicKey::Rsa { n: rsa.n, e: rsa.e },
                    },
                    Jwk {
                        kid: Some("ec".into()),
                        alg: Some("ES256".into()),
                        key: PublicKey::P256(self.es256.public_key().as_ref().to_vec()),
                    },
                    Jwk {
                        kid: Some("ed".into()),
                        alg: None,
                        key: PublicKey::Ed25519(self.ed25519.public_key().as_ref().to_vec()),
                    },
                ],
            }
        }

        /// The RSA key's modulus and exponent, big-endian without leading zeros.
        pub fn rsa_components(&self) -> RsaPublicKeyComponents<Vec<u8>> {
            RsaPublicKeyComponents::from(self.rsa.public())
        }

        /// A compact JWS of `claims` signed with `alg` (RS256, PS256, ES256 or EdDSA).
        pub fn sign(&self, alg: &str, kid: Option<&str>, claims: &Value) -> String {
            let mut header = serde_json::json!({"alg": alg, "typ": "JWT"});
            if let Some(k) = kid {
                header["kid"] = Value::String(k.into());
            }
            let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
            let input = format!(
                "{}.{}",
                b64.encode(header.to_string()),
                b64.encode(claims.to_string())
            );
            let rng = SystemRandom::new();
            let sig = match alg {
                "RS256" | "PS256" => {
                    let mut sig = vec![0; self.rsa.public().modulus_len()];
                    let padding: &'static dyn signature::RsaEncoding = if alg == "RS256" {
                        &signature::RSA_PKCS1_SHA256
                    } else {
                        &signature::RSA_PSS_SHA256
                    };
                    self.rsa
                        .sign(padding, &rng, input.as_bytes(), &mut sig)
                        .unwrap();
                    sig
                }
                "ES256" => self
                    .es256
                    .sign(&rng, input.as_bytes())
                    .unwrap()
                    .as_ref()
                    .to_vec(),
                _ => self.ed25519.sign(input.as_bytes()).as_ref().to_vec(),
            };
            format!("{input}.{}", b64.encode(sig))
        }
    }

    pub const NOW_MS: i64 = 1_800_000_000_000;

    pub fn claims(sub: &str) -> Value {
        serde_json::json!({"sub": sub, "iat": NOW_MS / 1000 - 10, "exp": NOW_MS / 1000 + 3600,
                           "iss": "https://issuer.test", "scope": "kafka"})
    }

    fn validator(signer: &Signer) -> JwtValidator {
        JwtValidator::new(
            signer.jwks(),
            ValidatorSettings {
                expected_issuer: Some("https://issuer.test".into()),
                ..ValidatorSettings::default()
            },
        )
    }

    /// Every accepted algorithm verifies with its key, found by kid or (without a kid) by
    /// trying the keys; the principal is the sub claim and exp gives the expiry.
    #[test]
    fn each_algorithm_validates() {
        let signer = Signer::new();
        let v = validator(&signer);
        for (alg, kid) in [
            ("RS256", "rsa"),
            ("PS256", "rsa"),
            ("ES256", "ec"),
            ("EdDSA", "ed"),
        ] {
            for kid in [Some(kid), None] {
                let token = signer.sign(alg, kid, &claims("alice"));
                let ok = v
                    .validate(&token, NOW_MS)
                    .unwrap_or_else(|e| panic!("{alg} {kid:?}: {e}"));
                assert_eq!(ok.principal, "alice");
                assert_eq!(ok.expires_at_ms, NOW_MS + 3_600_000);
                assert_eq!(ok.scopes, vec!["kafka".to_string()]);
            }
        }
    }

    /// Kafka's refusals: bad signature (payload changed, or another key's kid), `none`,
    /// HMAC, expired (past the skew), not yet valid, no iat/exp/sub, wrong issuer, audience
    /// mismatch (and an aud when none is expected), malformed sections.
    #[test]
    fn refusals() {
        let signer = Signer::new();
        let v = validator(&signer);
        let good = signer.sign("RS256", Some("rsa"), &claims("alice"));
        let (hp, sig) = good.rsplit_once('.').unwrap();
        let (h, _) = hp.split_once('.').unwrap();
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let forged = format!("{h}.{}.{sig}", b64.encode(claims("root").to_string()));
        assert_eq!(v.validate(&forged, NOW_MS), Err(JwtError::BadSignature));
        // The kid names a key of another type: it is tried and cannot verify.
        let wrong_kid = signer.sign("ES256", Some("ed"), &claims("alice"));
        assert_eq!(v.validate(&wrong_kid, NOW_MS), Err(JwtError::BadSignature));
        let unknown_kid = signer.sign("RS256", Some("other"), &claims("alice"));
        assert!(matches!(
            v.validate(&unknown_kid, NOW_MS),
            Err(JwtError::NoKey { .. })
        ));
        let none = format!(
            "{}.{}.",
            b64.encode(r#"{"alg":"none"}"#),
            b64.encode(claims("alice").to_string())
        );
        assert_eq!(
            v.validate(&none, NOW_MS),
            Err(JwtError::Algorithm("none".into()))
        );
        let hs = format!(
            "{}.{}.AAAA",
            b64.encode(r#"{"alg":"HS256"}"#),
            b64.encode("{}")
        );
        assert_eq!(
            v.validate(&hs, NOW_MS),
            Err(JwtError::Algorithm("HS256".into()))
        );

        let with = |f: &dyn Fn(&mut Value)| {
            let mut c = claims("alice");
            f(&mut c);
            v.validate(&signer.sign("ES256", Some("ec"), &c), NOW_MS)
        };
        let now_s = NOW_MS / 1000;
        assert!(matches!(
            with(&|c| c["exp"] = (now_s - 31).into()),
            Err(JwtError::Expired { .. })
        ));
        assert!(
            with(&|c| c["exp"] = (now_s - 29).into()).is_ok(),
            "within the clock skew"
        );
        assert!(matches!(
            with(&|c| c["nbf"] = (now_s + 31).into()),
            Err(JwtError::NotYetValid { .. })
        ));
        assert!(with(&|c| c["nbf"] = (now_s + 29).into()).is_ok());
        for claim in ["exp", "iat", "sub"] {
            assert_eq!(
                with(&|c| {
                    c.as_object_mut().unwrap().remove(claim);
                }),
                Err(JwtError::MissingClaim(claim.into()))
            );
        }
        assert!(matches!(
            with(&|c| c["sub"] = " ".into()),
            Err(JwtError::BadClaim { .. })
        ));
        assert!(matches!(
            with(&|c| c["iss"] = "https://evil.test".into()),
            Err(JwtError::Issuer { .. })
        ));
        assert!(matches!(
            with(&|c| c["aud"] = "kafka".into()),
            Err(JwtError::Audience { .. })
        ));
        assert!(matches!(
            with(&|c| c["exp"] = "tomorrow".into()),
            Err(JwtError::BadClaim { .. })
        ));
        assert!(matches!(
            with(&|c| c["scope"] = serde_json::json!(["a", "a"])),
            Err(JwtError::BadClaim { .. })
        ));

        let mut aud = validator(&signer);
        aud.settings.expected_audience = vec!["kafka".into(), "other".into()];
        let token = |a: Value| {
            let mut c = claims("alice");
            c["aud"] = a;
            signer.sign("RS256", None, &c)
        };
        assert!(aud.validate(&token("kafka".into()), NOW_MS).is_ok());
        assert!(aud
            .validate(&token(serde_json::json!(["x", "other"])), NOW_MS)
            .is_ok());
        assert!(matches!(
            aud.validate(&token("x".into()), NOW_MS),
            Err(JwtError::Audience { .. })
        ));
        assert!(matches!(
            aud.validate(&signer.sign("RS256", None, &claims("alice")), NOW_MS),
            Err(JwtError::Audience { .. })
        ));
        let mut sub = validator(&signer);
        sub.settings.sub_claim_name = "client_id".into();
        let mut c = claims("alice");
        c["client_id"] = "svc".into();
        assert_eq!(
            sub.validate(&signer.sign("RS256", None, &c), NOW_MS)
                .unwrap()
                .principal,
            "svc"
        );

        for bad in [
            "",
            "a",
            "a.b",
            "a.b.c.d",
            ".x.y",
            "!!.e30.x",
            "e30.!!.x",
            "e30.e30.!!",
        ] {
            assert!(v.validate(bad, NOW_MS).is_err(), "{bad}");
        }
        // The error never carries the token.
        let e = v.validate(&forged, NOW_MS).unwrap_err().to_string();
        assert!(!e.contains(sig));
    }

    proptest::proptest! {
        /// Random bytes never panic the JWKS, JWS or claims parsers, nor any SASL mechanism.
        #[test]
        fn random_input_never_panics(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            fuzz(&data);
            crate::security::sasl::fuzz_all(&data);
        }

        /// A signed token with one byte changed, inserted or removed never panics and is
        /// always refused: the signature covers every byte, and each section has one
        /// spelling.
        #[test]
        fn mutated_tokens_are_refused(pos in proptest::prelude::any::<proptest::sample::Index>(),
                                      byte in proptest::prelude::any::<u8>(), op in 0u8..3) {
            static GOOD: std::sync::OnceLock<(String, JwtValidator)> = std::sync::OnceLock::new();
            let (token, v) = GOOD.get_or_init(|| {
                let signer = Signer::new();
                let mut c = claims("alice");
                c.as_object_mut().unwrap().remove("iss");
                let v = JwtValidator::new(signer.jwks(), ValidatorSettings::default());
                (signer.sign("ES256", None, &c), v)
            });
            proptest::prop_assert!(v.validate(token, NOW_MS).is_ok());
            let mut bytes = token.clone().into_bytes();
            let i = pos.index(bytes.len() + 1);
            match op {
                0 => if let Some(b) = bytes.get_mut(i) { *b = byte },
                1 => bytes.insert(i, byte),
                _ => if i < bytes.len() { bytes.remove(i); },
            }
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let result = v.validate(&text, NOW_MS);
            if text != *token {
                proptest::prop_assert!(result.is_err(), "{text}");
            }
            fuzz(&bytes);
        }
    }

    /// A JWKS parses RSA, EC P-256/P-384 and Ed25519 keys, skips encryption keys and other
    /// types, and refuses one with no usable key or a malformed one.
    #[test]
    fn jwks_parsing() {
        let signer = Signer::new();
        let rsa = signer.rsa_components();
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let ec = signer.es256.public_key().as_ref();
        let doc = serde_json::json!({"keys": [
            {"kty": "RSA", "kid": "r", "use": "sig", "n": b64.encode(&rsa.n), "e": b64.encode(&rsa.e)},
            {"kty": "EC", "crv": "P-256", "kid": "e", "alg": "ES256", "x": b64.encode(&ec[1..33]), "y": b64.encode(&ec[33..])},
            {"kty": "RSA", "use": "enc", "n": "AQAB", "e": "AQAB"},
            {"kty": "oct", "k": "c2VjcmV0"},
            {"kty": "EC", "crv": "P-521", "x": "AA", "y": "AA"},
        ]});
        let jwks = Jwks::parse(doc.to_string().as_bytes()).unwrap();
        assert_eq!(jwks.keys.len(), 2);
        let v = JwtValidator::new(jwks, ValidatorSettings::default());
        let mut c = claims("bob");
        c.as_object_mut().unwrap().remove("iss");
        assert!(v
            .validate(&signer.sign("RS256", Some("r"), &c), NOW_MS)
            .is_ok());
        assert!(v
            .validate(&signer.sign("ES256", Some("e"), &c), NOW_MS)
            .is_ok());
        for bad in [
            "",
            "[]",
            "{}",
            r#"{"keys":{}}"#,
            r#"{"keys":[]}"#,
            r#"{"keys":[1]}"#,
            r#"{"keys":[{"kty":"EC","crv":"P-256","x":"AA","y":"AA"}]}"#,
            r#"{"keys":[{"kty":"RSA","n":"!","e":"AQAB"}]}"#,
        ] {
            assert!(Jwks::parse(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
