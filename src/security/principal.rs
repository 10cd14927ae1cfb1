//! The principal of a TLS client: the subject of its certificate as Kafka writes it (Java's
//! `X500Principal.getName()`, RFC 2253: the last RDN first, `CN=client,O=test`), mapped by
//! Kafka's `ssl.principal.mapping.rules` (`RULE:pattern/replacement/[LU]`, `DEFAULT`).
//!
//! The certificate is bytes from the network (already verified by rustls against the trust
//! store when client auth is on, but parsed here independently): every length is checked,
//! nothing is indexed blindly, and a certificate this parser cannot read is an error, not a
//! panic.
use std::fmt::Write as _;

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum PrincipalError {
    #[error("certificate: {0}")]
    Der(&'static str),
    #[error("ssl_principal_mapping_rules: {0}")]
    Rules(String),
    #[error("no ssl_principal_mapping_rules rule applies to {dn:?}")]
    NoRuleApplies { dn: String },
}

/// DER tags used by certificates' names.
const TAG_SEQUENCE: u8 = 0x30;
const TAG_SET: u8 = 0x31;
const TAG_OID: u8 = 0x06;
const TAG_INTEGER: u8 = 0x02;
const TAG_VERSION: u8 = 0xA0;
const TAG_UTF8: u8 = 0x0C;
const TAG_PRINTABLE: u8 = 0x13;
const TAG_T61: u8 = 0x14;
const TAG_IA5: u8 = 0x16;
const TAG_UNIVERSAL: u8 = 0x1C;
const TAG_BMP: u8 = 0x1E;

/// A DER element: its tag, its content, and all of its bytes (for `#hex` values).
struct Tlv<'a> {
    tag: u8,
    content: &'a [u8],
    whole: &'a [u8],
}

/// Reads one element off the front of `input`.
fn take<'a>(input: &mut &'a [u8]) -> Result<Tlv<'a>, PrincipalError> {
    let all = *input;
    let (&tag, rest) = all.split_first().ok_or(PrincipalError::Der("truncated"))?;
    let (&first, mut rest) = rest.split_first().ok_or(PrincipalError::Der("truncated"))?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return Err(PrincipalError::Der("unsupported length"));
        }
        let (bytes, after) = rest
            .split_at_checked(n)
            .ok_or(PrincipalError::Der("truncated"))?;
        rest = after;
        bytes
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b))
    };
    let header = all.len() - rest.len();
    let content = rest.get(..len).ok_or(PrincipalError::Der("truncated"))?;
    let whole = all
        .get(..header + len)
        .ok_or(PrincipalError::Der("truncated"))?;
    *input = all.get(header + len..).unwrap_or_default();
    Ok(Tlv {
        tag,
        content,
        whole,
    })
}

fn expect<'a>(
    input: &mut &'a [u8],
    tag: u8,
    what: &'static str,
) -> Result<Tlv<'a>, PrincipalError> {
    let tlv = take(input)?;
    if tlv.tag != tag {
        return Err(PrincipalError::Der(what));
    }
    Ok(tlv)
}

/// The subject of a DER certificate, formatted as Java's `X500Principal.getName()`.
pub fn subject_dn(cert_der: &[u8]) -> Result<String, PrincipalError> {
    let mut input = cert_der;
    let cert = expect(&mut input, TAG_SEQUENCE, "not a certificate")?;
    let mut cert = cert.content;
    let tbs = expect(&mut cert, TAG_SEQUENCE, "no tbsCertificate")?;
    let mut tbs = tbs.content;
    if tbs.first() == Some(&TAG_VERSION) {
        take(&mut tbs)?;
    }
    expect(&mut tbs, TAG_INTEGER, "no serial number")?;
    expect(&mut tbs, TAG_SEQUENCE, "no signature algorithm")?;
    expect(&mut tbs, TAG_SEQUENCE, "no issuer")?;
    expect(&mut tbs, TAG_SEQUENCE, "no validity")?;
    let subject = expect(&mut tbs, TAG_SEQUENCE, "no subject")?;
    format_name(subject.content)
}

/// RFC 2253: RDNs last first, separated by `,`; the attributes of one RDN by `+`.
fn format_name(mut rdns: &[u8]) -> Result<String, PrincipalError> {
    let mut parts = Vec::new();
    while !rdns.is_empty() {
        let set = expect(&mut rdns, TAG_SET, "RDN is not a SET")?;
        let mut avas = set.content;
        let mut rdn = Vec::new();
        while !avas.is_empty() {
            let ava = expect(&mut avas, TAG_SEQUENCE, "attribute is not a SEQUENCE")?;
            let mut ava = ava.content;
            let oid = expect(&mut ava, TAG_OID, "attribute type is not an OID")?;
            let value = take(&mut ava)?;
            rdn.push(format_ava(oid.content, &value)?);
        }
        parts.push(rdn.join("+"));
    }
    parts.reverse();
    Ok(parts.join(","))
}

fn format_ava(oid: &[u8], value: &Tlv<'_>) -> Result<String, PrincipalError> {
    // RFC 2253's keywords, which Java's RFC 2253 output uses; any other type is its dotted
    // OID with the value's DER in hex.
    let keyword = match oid {
        [0x55, 0x04, 0x03] => Some("CN"),
        [0x55, 0x04, 0x06] => Some("C"),
        [0x55, 0x04, 0x07] => Some("L"),
        [0x55, 0x04, 0x08] => Some("ST"),
        [0x55, 0x04, 0x0A] => Some("O"),
        [0x55, 0x04, 0x0B] => Some("OU"),
        [0x55, 0x04, 0x09] => Some("STREET"),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xF2, 0x2C, 0x64, 0x01, 0x19] => Some("DC"),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xF2, 0x2C, 0x64, 0x01, 0x01] => Some("UID"),
        _ => None,
    };
    let text = match keyword {
        Some(_) => decode_string(value),
        None => None,
    };
    match (keyword, text) {
        (Some(k), Some(text)) => Ok(format!("{k}={}", escape(&text))),
        (k, _) => {
            let name = match k {
                Some(k) => k.to_string(),
                None => dotted_oid(oid)?,
            };
            let mut hex = String::with_capacity(value.whole.len() * 2);
            for b in value.whole {
                let _ = write!(hex, "{b:02x}");
            }
            Ok(format!("{name}=#{hex}"))
        }
    }
}

fn decode_string(value: &Tlv<'_>) -> Option<String> {
    match value.tag {
        TAG_UTF8 | TAG_PRINTABLE | TAG_IA5 => {
            std::str::from_utf8(value.content).ok().map(str::to_string)
        }
        // T.61 is in practice Latin-1.
        TAG_T61 => Some(value.content.iter().map(|&b| char::from(b)).collect()),
        TAG_BMP => {
            let units: Vec<u16> = value
                .content
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        TAG_UNIVERSAL => value
            .content
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        _ => None,
    }
}

/// RFC 2253 escaping, as Java applies it.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn dotted_oid(oid: &[u8]) -> Result<String, PrincipalError> {
    let (&first, rest) = oid.split_first().ok_or(PrincipalError::Der("empty OID"))?;
    let mut out = format!("{}.{}", first / 40, first % 40);
    let mut acc: u64 = 0;
    for &b in rest {
        acc = acc
            .checked_mul(128)
            .ok_or(PrincipalError::Der("OID arc too large"))?
            | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            let _ = write!(out, ".{acc}");
            acc = 0;
        }
    }
    Ok(out)
}

/// One of Kafka's `ssl.principal.mapping.rules`.
#[derive(Debug, Clone)]
enum Rule {
    Default,
    Replace {
        pattern: regex::Regex,
        /// The replacement in the regex crate's syntax (`${1}` for Java's `$1`).
        replacement: String,
        case: Case,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

/// Kafka's `SslPrincipalMapper`: the rules in order, the first that applies wins.
#[derive(Debug, Clone)]
pub struct PrincipalMapper {
    rules: Vec<Rule>,
}

impl PrincipalMapper {
    /// Parses the rules as Kafka does: comma- or newline-separated `DEFAULT` and
    /// `RULE:pattern/replacement/[LU]` (a pattern may contain commas; `\` escapes `/`).
    /// Empty means `DEFAULT`.
    pub fn parse(text: &str) -> Result<PrincipalMapper, PrincipalError> {
        let mut rules = Vec::new();
        let mut rest = text.trim_start();
        let bad = |m: String| PrincipalError::Rules(m);
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("DEFAULT") {
                rules.push(Rule::Default);
                rest = after;
            } else if let Some(after) = rest.strip_prefix("RULE:") {
                let (pattern, after) = until_slash(after)
                    .ok_or_else(|| bad(format!("{rest:?}: expected RULE:pattern/replacement/")))?;
                let (replacement, after) = until_slash(after)
                    .ok_or_else(|| bad(format!("{rest:?}: expected RULE:pattern/replacement/")))?;
                let (case, after) = match after.chars().next() {
                    Some('L') => (Case::Lower, &after[1..]),
                    Some('U') => (Case::Upper, &after[1..]),
                    _ => (Case::Keep, after),
                };
                // Java's `matches()`: the whole DN must match.
                let pattern = regex::Regex::new(&format!("^(?:{pattern})$"))
                    .map_err(|e| bad(format!("pattern {pattern:?}: {e}")))?;
                rules.push(Rule::Replace {
                    pattern,
                    replacement: java_replacement(&replacement),
                    case,
                });
                rest = after;
            } else {
                return Err(bad(format!("{rest:?}: expected DEFAULT or RULE:")));
            }
            // Anything up to the separator is ignored, as Kafka's parser does.
            rest = match rest.find([',', '\n']) {
                Some(i) => rest[i + 1..].trim_start(),
                None => "",
            };
        }
        if rules.is_empty() {
            rules.push(Rule::Default);
        }
        Ok(PrincipalMapper { rules })
    }

    /// The principal name of a certificate subject `dn`.
    pub fn map(&self, dn: &str) -> Result<String, PrincipalError> {
        for rule in &self.rules {
            match rule {
                Rule::Default => return Ok(dn.to_string()),
                Rule::Replace {
                    pattern,
                    replacement,
                    case,
                } => {
                    if !pattern.is_match(dn) {
                        continue;
                    }
                    let out = pattern.replace_all(dn, replacement.as_str()).into_owned();
                    return Ok(match case {
                        Case::Keep => out,
                        Case::Lower => out.to_lowercase(),
                        Case::Upper => out.to_uppercase(),
                    });
                }
            }
        }
        Err(PrincipalError::NoRuleApplies { dn: dn.to_string() })
    }
}

/// Splits `text` at its first `/` not escaped by `\`; the part before keeps its escapes
/// (they mean the same to the regex), except `\/`, which becomes `/`.
fn until_slash(text: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, '/')) => out.push('/'),
                Some((_, other)) => {
                    out.push('\\');
                    out.push(other);
                }
                None => return None,
            },
            '/' => return Some((out, &text[i + 1..])),
            c => out.push(c),
        }
    }
    None
}

/// Java's replacement syntax (`$1`, `\$` for a literal `$`) in the regex crate's (`${1}`, `$$`).
fn java_replacement(java: &str) -> String {
    let mut out = String::with_capacity(java.len() + 4);
    let mut chars = java.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(other) => out.push(other),
                None => {}
            },
            '$' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                if digits.is_empty() {
                    out.push_str("$$");
                } else {
                    let _ = write!(out, "${{{digits}}}");
                }
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Builds a DER Name from (OID bytes, string tag, value), RDNs in encoding order.
    fn name(rdns: &[(&[u8], u8, &str)]) -> Vec<u8> {
        fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
            let mut out = vec![tag];
            if content.len() < 0x80 {
                out.push(content.len() as u8);
            } else {
                out.push(0x82);
                out.extend_from_slice(&(content.len() as u16).to_be_bytes());
            }
            out.extend_from_slice(content);
            out
        }
        let mut seq = Vec::new();
        for (oid, tag, value) in rdns {
            let ava = [tlv(TAG_OID, oid), tlv(*tag, value.as_bytes())].concat();
            seq.extend(tlv(TAG_SET, &tlv(TAG_SEQUENCE, &ava)));
        }
        let subject = tlv(TAG_SEQUENCE, &seq);
        let tbs = [
            tlv(TAG_VERSION, &tlv(TAG_INTEGER, &[2])),
            tlv(TAG_INTEGER, &[1, 2, 3]),
            tlv(TAG_SEQUENCE, &[]),
            tlv(TAG_SEQUENCE, &[]),
            tlv(TAG_SEQUENCE, &[]),
            subject,
            tlv(TAG_SEQUENCE, &[]),
        ]
        .concat();
        tlv(
            TAG_SEQUENCE,
            &[tlv(TAG_SEQUENCE, &tbs), tlv(TAG_SEQUENCE, &[])].concat(),
        )
    }

    const CN: &[u8] = &[0x55, 0x04, 0x03];
    const O: &[u8] = &[0x55, 0x04, 0x0A];
    const EMAIL: &[u8] = &[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x09, 0x01];

    /// The subject prints as Java's RFC 2253 form: last RDN first, specials escaped, unknown
    /// attribute types as dotted OID and hex DER.
    #[test]
    fn subject_as_java_prints_it() {
        let der = name(&[(O, TAG_UTF8, "test"), (CN, TAG_PRINTABLE, "client")]);
        assert_eq!(subject_dn(&der).unwrap(), "CN=client,O=test");
        let der = name(&[(CN, TAG_UTF8, "a,b+c "), (EMAIL, TAG_IA5, "x@y")]);
        assert_eq!(
            subject_dn(&der).unwrap(),
            "1.2.840.113549.1.9.1=#1603784079,CN=a\\,b\\+c\\ "
        );
    }

    /// Truncated or mangled certificates are errors, never panics.
    #[test]
    fn bad_certificates_are_errors() {
        let der = name(&[(CN, TAG_UTF8, "client")]);
        for cut in 0..der.len() {
            assert!(subject_dn(&der[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..der.len() {
            let mut bad = der.clone();
            bad[i] ^= 0xff;
            let _ = subject_dn(&bad);
        }
    }

    /// Kafka's rules: first match wins, whole-DN match, $1 back-references, L/U, DEFAULT,
    /// commas inside a pattern, and no match at all being an error.
    #[test]
    fn mapping_rules_as_kafka() {
        let m = PrincipalMapper::parse("").unwrap();
        assert_eq!(m.map("CN=client,O=test").unwrap(), "CN=client,O=test");
        let m = PrincipalMapper::parse(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),O=(.*?)$/$1@$2/L, DEFAULT",
        )
        .unwrap();
        assert_eq!(m.map("CN=svc,OU=ServiceUsers,O=x").unwrap(), "svc");
        assert_eq!(m.map("CN=Bob,O=Test").unwrap(), "bob@test");
        assert_eq!(m.map("O=other").unwrap(), "O=other");
        let m = PrincipalMapper::parse("RULE:^CN=([^,]*).*$/$1/U").unwrap();
        assert_eq!(m.map("CN=bob,O=x").unwrap(), "BOB");
        assert!(matches!(
            m.map("O=x"),
            Err(PrincipalError::NoRuleApplies { .. })
        ));
        let m = PrincipalMapper::parse("RULE:^CN=(.*)$/a\\/b-$1/").unwrap();
        assert_eq!(m.map("CN=z").unwrap(), "a/b-z");
        assert!(PrincipalMapper::parse("RULE:^CN=(.*$/x/").is_err());
        assert!(PrincipalMapper::parse("RULE:nothing").is_err());
        assert!(PrincipalMapper::parse("SOMETHING").is_err());
    }
}
