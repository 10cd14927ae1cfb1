//! Syslog message headers: RFC 5424 and RFC 3164 (the BSD format), parsed from one message
//! without its transport framing.
//!
//! What is parsed: PRI (facility and severity), the timestamp (to milliseconds since the
//! epoch), hostname, app-name, procid and msgid. The rest of the line (structured data, the
//! message) is not rewritten or copied: the record keeps the whole line as its value, so a
//! parse only borrows slices of it.
//!
//! Which format: after `<PRI>`, a version number and a space (`1 `) mean RFC 5424, which is
//! then parsed strictly (a bad field is a parse error). Anything else is RFC 3164, which in
//! the wild is loose, so it is parsed as rsyslog does: a timestamp (`Mmm dd hh:mm:ss` or
//! RFC 3339, as rsyslog's forwarding templates write), then a hostname unless the next word
//! is already the tag (`app[pid]:`), then the tag.
//!
//! RFC 3164 timestamps carry neither year nor zone: they are taken as UTC, in the year of the
//! receive time, or the year before when that would put them more than a day in the future
//! (a December line received in January).
//!
//! Any byte sequence gives `Ok` or a typed [`ParseError`]; no indexing can panic.
use thiserror::Error;

/// Why a line did not parse as syslog; the record keeps the line and carries this reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ParseError {
    #[error("empty message")]
    Empty,
    #[error("no <PRI> at the start")]
    NoPri,
    #[error("PRI is not a number from 0 to 191")]
    BadPri,
    #[error("RFC 5424 version is not 1 to 999")]
    BadVersion,
    #[error("RFC 5424 header ends early")]
    Truncated,
    #[error("bad timestamp")]
    BadTimestamp,
    #[error("RFC 5424 {field} is longer than {max} bytes or not printable ASCII")]
    BadField { field: &'static str, max: usize },
    #[error("RFC 5424 structured data is malformed")]
    BadStructuredData,
    #[error("RFC 3164 message has no timestamp")]
    NoTimestamp,
}

/// Which RFC a message followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Rfc5424,
    Rfc3164,
}

/// The parsed header of one message; the byte fields borrow from the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message<'a> {
    pub format: Format,
    /// 0..=23 (`kern` .. `local7`).
    pub facility: u8,
    /// 0..=7 (`emerg` .. `debug`).
    pub severity: u8,
    /// Milliseconds since the epoch, when the message carries a timestamp.
    pub timestamp_ms: Option<i64>,
    pub hostname: Option<&'a [u8]>,
    pub app_name: Option<&'a [u8]>,
    pub procid: Option<&'a [u8]>,
    pub msgid: Option<&'a [u8]>,
}

/// RFC 5424 field bounds (section 6): what a sender may put in each header field.
const HOSTNAME_LEN_MAX: usize = 255;
const APP_NAME_LEN_MAX: usize = 48;
const PROCID_LEN_MAX: usize = 128;
const MSGID_LEN_MAX: usize = 32;
/// RFC 3164's tag is at most 32 characters; rsyslog allows longer ones, so do we, bounded.
const TAG_LEN_MAX: usize = 128;

/// Standard facility names, by number (RFC 5424 table 1 as rsyslog and syslog-ng name them).
pub const FACILITY_NAMES: [&str; 24] = [
    "kern",
    "user",
    "mail",
    "daemon",
    "auth",
    "syslog",
    "lpr",
    "news",
    "uucp",
    "cron",
    "authpriv",
    "ftp",
    "ntp",
    "security",
    "console",
    "solaris-cron",
    "local0",
    "local1",
    "local2",
    "local3",
    "local4",
    "local5",
    "local6",
    "local7",
];

/// Standard severity names, by number (RFC 5424 table 2 as rsyslog names them).
pub const SEVERITY_NAMES: [&str; 8] = [
    "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug",
];

pub fn facility_name(facility: u8) -> &'static str {
    FACILITY_NAMES
        .get(usize::from(facility))
        .copied()
        .unwrap_or("unknown")
}

pub fn severity_name(severity: u8) -> &'static str {
    SEVERITY_NAMES
        .get(usize::from(severity))
        .copied()
        .unwrap_or("unknown")
}

/// The facility number of a name (or of a number written out), for routing rules.
pub fn facility_from_name(name: &str) -> Option<u8> {
    if let Ok(n) = name.parse::<u8>() {
        return (usize::from(n) < FACILITY_NAMES.len()).then_some(n);
    }
    FACILITY_NAMES
        .iter()
        .position(|n| n.eq_ignore_ascii_case(name))
        .and_then(|i| u8::try_from(i).ok())
}

/// Parses one message (no framing, no trailing newline). `receive_ms` supplies the year of
/// an RFC 3164 timestamp.
pub fn parse(line: &[u8], receive_ms: i64) -> Result<Message<'_>, ParseError> {
    if line.is_empty() {
        return Err(ParseError::Empty);
    }
    let (pri, rest) = parse_pri(line)?;
    let facility = pri / 8;
    let severity = pri % 8;
    if let Some(rest) = rfc5424_version(rest)? {
        parse_5424(facility, severity, rest)
    } else {
        parse_3164(facility, severity, rest, receive_ms)
    }
}

/// `<PRI>`: 1 to 3 digits, 0..=191, no leading zero unless it is `<0>`.
fn parse_pri(line: &[u8]) -> Result<(u8, &[u8]), ParseError> {
    let rest = line.strip_prefix(b"<").ok_or(ParseError::NoPri)?;
    let end = rest
        .iter()
        .take(4)
        .position(|&b| b == b'>')
        .ok_or(ParseError::BadPri)?;
    let (digits, after) = rest.split_at(end);
    if digits.is_empty() || (digits.len() > 1 && digits.first() == Some(&b'0')) {
        return Err(ParseError::BadPri);
    }
    let pri = parse_decimal(digits).ok_or(ParseError::BadPri)?;
    if pri > 191 {
        return Err(ParseError::BadPri);
    }
    let pri = u8::try_from(pri).map_err(|_| ParseError::BadPri)?;
    Ok((pri, after.get(1..).unwrap_or_default()))
}

/// `Some(rest after "VERSION SP")` when the message is RFC 5424.
fn rfc5424_version(rest: &[u8]) -> Result<Option<&[u8]>, ParseError> {
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || rest.get(digits) != Some(&b' ') {
        return Ok(None);
    }
    // "<13>1 " is 5424; but a 3164 line never starts with digits then a space (its
    // timestamp starts with a month name, or with a 4-digit year and '-').
    let version = rest.get(..digits).and_then(parse_decimal);
    match version {
        Some(v) if (1..=999).contains(&v) && digits <= 3 => Ok(rest.get(digits + 1..)),
        _ => Err(ParseError::BadVersion),
    }
}

fn parse_5424(facility: u8, severity: u8, rest: &[u8]) -> Result<Message<'_>, ParseError> {
    let mut fields = rest.splitn(6, |&b| b == b' ');
    let mut next = || fields.next().ok_or(ParseError::Truncated);
    let timestamp = next()?;
    let hostname = header_field(next()?, "hostname", HOSTNAME_LEN_MAX)?;
    let app_name = header_field(next()?, "app-name", APP_NAME_LEN_MAX)?;
    let procid = header_field(next()?, "procid", PROCID_LEN_MAX)?;
    let msgid = header_field(next()?, "msgid", MSGID_LEN_MAX)?;
    let tail = next()?;
    check_structured_data(tail)?;
    let timestamp_ms = if timestamp == b"-" {
        None
    } else {
        Some(parse_rfc3339(timestamp).ok_or(ParseError::BadTimestamp)?)
    };
    Ok(Message {
        format: Format::Rfc5424,
        facility,
        severity,
        timestamp_ms,
        hostname,
        app_name,
        procid,
        msgid,
    })
}

/// A header field: `-` is absent; otherwise 1..=max printable US-ASCII characters.
fn header_field<'a>(
    field: &'a [u8],
    name: &'static str,
    max: usize,
) -> Result<Option<&'a [u8]>, ParseError> {
    if field == b"-" {
        return Ok(None);
    }
    if field.is_empty() || field.len() > max || !field.iter().all(|b| (33..=126).contains(b)) {
        return Err(ParseError::BadField { field: name, max });
    }
    Ok(Some(field))
}

/// Checks that `tail` (after MSGID SP) starts with `-` or one or more well-formed SD-ELEMENTs
/// (`[id name="value" ...]`, with `\"`, `\\` and `\]` escapes inside values), followed by
/// nothing or a space and the message.
fn check_structured_data(tail: &[u8]) -> Result<(), ParseError> {
    let after = if let Some(after) = tail.strip_prefix(b"-") {
        after
    } else {
        let mut rest = tail;
        if rest.first() != Some(&b'[') {
            return Err(ParseError::BadStructuredData);
        }
        while rest.first() == Some(&b'[') {
            rest = sd_element(rest.get(1..).unwrap_or_default())?;
        }
        rest
    };
    if after.is_empty() || after.first() == Some(&b' ') {
        Ok(())
    } else {
        Err(ParseError::BadStructuredData)
    }
}

/// One SD-ELEMENT after its `[`; returns what follows its `]`.
fn sd_element(mut rest: &[u8]) -> Result<&[u8], ParseError> {
    let name_len = |s: &[u8]| {
        s.iter()
            .take_while(|&&b| (33..=126).contains(&b) && !matches!(b, b'=' | b' ' | b']' | b'"'))
            .count()
    };
    let id = name_len(rest);
    if id == 0 || id > 32 {
        return Err(ParseError::BadStructuredData);
    }
    rest = rest.get(id..).unwrap_or_default();
    loop {
        match rest.first() {
            Some(b']') => return Ok(rest.get(1..).unwrap_or_default()),
            Some(b' ') => {
                rest = rest.get(1..).unwrap_or_default();
                let name = name_len(rest);
                if name == 0 || name > 32 {
                    return Err(ParseError::BadStructuredData);
                }
                rest = rest.get(name..).unwrap_or_default();
                rest = rest
                    .strip_prefix(b"=\"")
                    .ok_or(ParseError::BadStructuredData)?;
                // The value runs to the first unescaped '"'.
                let mut i = 0;
                loop {
                    match rest.get(i) {
                        Some(b'\\') => i += 2,
                        Some(b'"') => break,
                        Some(_) => i += 1,
                        None => return Err(ParseError::BadStructuredData),
                    }
                }
                rest = rest.get(i + 1..).unwrap_or_default();
            }
            _ => return Err(ParseError::BadStructuredData),
        }
    }
}

fn parse_3164(
    facility: u8,
    severity: u8,
    rest: &[u8],
    receive_ms: i64,
) -> Result<Message<'_>, ParseError> {
    let (timestamp_ms, rest) = if let Some((ts, rest)) = bsd_timestamp(rest, receive_ms) {
        (ts, rest)
    } else if let Some((ts, rest)) = rfc3339_word(rest) {
        (ts, rest)
    } else {
        return Err(ParseError::NoTimestamp);
    };
    let rest = rest.strip_prefix(b" ").unwrap_or(rest);
    let word_len = rest.iter().take_while(|&&b| b != b' ').count();
    let word = rest.get(..word_len).unwrap_or_default();
    // A word ending in ':' or holding '[' is the tag: the sender wrote no hostname (as a
    // local `logger` does).
    let (hostname, tag_area) = if word.is_empty() || word.ends_with(b":") || word.contains(&b'[') {
        (None, rest)
    } else {
        (
            Some(word),
            rest.get(word_len..)
                .unwrap_or_default()
                .strip_prefix(b" ")
                .unwrap_or_default(),
        )
    };
    let (app_name, procid) = parse_tag(tag_area);
    Ok(Message {
        format: Format::Rfc3164,
        facility,
        severity,
        timestamp_ms: Some(timestamp_ms),
        hostname,
        app_name,
        procid,
        msgid: None,
    })
}

/// The tag at the start of `s`: `app:`, `app[pid]:` or `app[pid]`; anything else is no tag
/// (the message starts at once).
fn parse_tag(s: &[u8]) -> (Option<&[u8]>, Option<&[u8]>) {
    let word_len = s
        .iter()
        .take(TAG_LEN_MAX + 1)
        .take_while(|&&b| b != b' ')
        .count();
    if word_len > TAG_LEN_MAX {
        return (None, None);
    }
    let word = s.get(..word_len).unwrap_or_default();
    let word = word.strip_suffix(b":").map_or((word, false), |w| (w, true));
    let (word, had_colon) = word;
    if let Some(open) = word.iter().position(|&b| b == b'[') {
        let app = word.get(..open).unwrap_or_default();
        let inside = word.get(open + 1..).unwrap_or_default();
        match inside.strip_suffix(b"]") {
            Some(pid) if !app.is_empty() && !pid.is_empty() => (Some(app), Some(pid)),
            _ => (None, None),
        }
    } else if had_colon && !word.is_empty() {
        (Some(word), None)
    } else {
        (None, None)
    }
}

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// `Mmm dd hh:mm:ss` (day space- or zero-padded, or a single digit as some senders write
/// it) at the start of `s`; returns the time and what follows.
fn bsd_timestamp(s: &[u8], receive_ms: i64) -> Option<(i64, &[u8])> {
    let month = MONTHS.iter().position(|m| s.get(..3) == Some(&m[..]))?;
    let rest = s.get(3..)?.strip_prefix(b" ")?;
    let rest = rest.strip_prefix(b" ").unwrap_or(rest);
    let day_len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if !(1..=2).contains(&day_len) {
        return None;
    }
    let day = parse_decimal(rest.get(..day_len)?)?;
    let rest = rest.get(day_len..)?.strip_prefix(b" ")?;
    let hms = rest.get(..8)?;
    if hms.get(2) != Some(&b':') || hms.get(5) != Some(&b':') {
        return None;
    }
    let hour = parse_decimal(hms.get(0..2)?)?;
    let minute = parse_decimal(hms.get(3..5)?)?;
    let second = parse_decimal(hms.get(6..8)?)?;
    if !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let month = u32::try_from(month).ok()? + 1;
    let (receive_year, _, _) = civil_from_days(receive_ms.div_euclid(86_400_000));
    let at = |year: i64| {
        days_from_civil(year, month, day as u32) * 86_400_000
            + (hour as i64 * 3600 + minute as i64 * 60 + second as i64) * 1000
    };
    let mut ts = at(receive_year);
    if ts > receive_ms + 86_400_000 {
        ts = at(receive_year - 1);
    }
    Some((ts, rest.get(8..)?))
}

/// An RFC 3339 timestamp as the first word of `s` (rsyslog's forwarding formats put one
/// where RFC 3164 has `Mmm dd hh:mm:ss`).
fn rfc3339_word(s: &[u8]) -> Option<(i64, &[u8])> {
    let len = s.iter().take_while(|&&b| b != b' ').count();
    let ts = parse_rfc3339(s.get(..len)?)?;
    Some((ts, s.get(len..)?))
}

/// RFC 3339 as RFC 5424 restricts it: `YYYY-MM-DDTHH:MM:SS[.frac](Z|+hh:mm|-hh:mm)`, to
/// milliseconds since the epoch (fractions past milliseconds are dropped).
pub fn parse_rfc3339(s: &[u8]) -> Option<i64> {
    let digits = |from: usize, to: usize| -> Option<u64> {
        let d = s.get(from..to)?;
        d.iter().all(u8::is_ascii_digit).then(|| parse_decimal(d))?
    };
    let sep = |at: usize, c: u8| s.get(at) == Some(&c);
    if !(sep(4, b'-') && sep(7, b'-') && (sep(10, b'T') || sep(10, b't')))
        || !(sep(13, b':') && sep(16, b':'))
    {
        return None;
    }
    let year = digits(0, 4)?;
    let month = digits(5, 7)?;
    let day = digits(8, 10)?;
    let hour = digits(11, 13)?;
    let minute = digits(14, 16)?;
    let second = digits(17, 19)?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let mut i = 19;
    let mut millis = 0u64;
    if sep(i, b'.') {
        i += 1;
        let frac = s
            .get(i..)?
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if !(1..=9).contains(&frac) {
            return None;
        }
        let mut scale = 100;
        for d in s.get(i..i + frac.min(3))? {
            millis += u64::from(d - b'0') * scale;
            scale /= 10;
        }
        i += frac;
    }
    let offset_minutes: i64 = match s.get(i) {
        Some(b'Z') | Some(b'z') if s.len() == i + 1 => 0,
        Some(&sign @ (b'+' | b'-')) if s.len() == i + 6 && sep(i + 3, b':') => {
            let h = digits(i + 1, i + 3)?;
            let m = digits(i + 4, i + 6)?;
            if h > 23 || m > 59 {
                return None;
            }
            let total = (h * 60 + m) as i64;
            if sign == b'-' {
                -total
            } else {
                total
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year as i64, month as u32, day as u32);
    let seconds =
        days * 86_400 + (hour * 3600 + minute * 60 + second.min(59)) as i64 - offset_minutes * 60;
    Some(seconds * 1000 + millis as i64)
}

/// A decimal number of at most 9 digits (so it cannot overflow).
fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 9 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        digits
            .iter()
            .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')),
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The (year, month, day) of a day count since 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use proptest::prelude::*;

    /// 2026-11-30T22:00:00Z, a receive time for the RFC 3164 year.
    const NOW: i64 = 1_796_076_000_000;

    #[test]
    fn rfc5424_examples_parse() {
        // Proves the RFC 5424 section 6.5 examples parse into their fields.
        let m = parse(
            b"<34>1 2003-10-11T22:14:15.003Z mymachine.example.com su - ID47 - \xef\xbb\xbf'su root' failed",
            NOW,
        )
        .unwrap();
        assert_eq!(m.format, Format::Rfc5424);
        assert_eq!((m.facility, m.severity), (4, 2));
        assert_eq!(m.timestamp_ms, Some(1_065_910_455_003));
        assert_eq!(m.hostname, Some(&b"mymachine.example.com"[..]));
        assert_eq!(m.app_name, Some(&b"su"[..]));
        assert_eq!(m.procid, None);
        assert_eq!(m.msgid, Some(&b"ID47"[..]));

        let m = parse(
            b"<165>1 2003-08-24T05:14:15.000003-07:00 192.0.2.1 myproc 8710 - - %% It's time",
            NOW,
        )
        .unwrap();
        assert_eq!((m.facility, m.severity), (20, 5));
        assert_eq!(m.timestamp_ms, Some(1_061_727_255_000));
        assert_eq!(m.procid, Some(&b"8710"[..]));

        let m = parse(
            br#"<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 iut="3" eventSource="Application" eventID="1011"][examplePriority@32473 class="high"]"#,
            NOW,
        )
        .unwrap();
        assert_eq!(m.app_name, Some(&b"evntslog"[..]));
        let m = parse(b"<13>1 - - - - - -", NOW).unwrap();
        assert_eq!(m.timestamp_ms, None);
        assert_eq!(m.hostname, None);
    }

    #[test]
    fn rfc5424_errors_are_typed() {
        // Proves malformed RFC 5424 headers give the matching error, never a guess.
        let cases: &[(&[u8], ParseError)] = &[
            (b"", ParseError::Empty),
            (b"hello", ParseError::NoPri),
            (b"<192>1 - - - - - -", ParseError::BadPri),
            (b"<013>1 - - - - - -", ParseError::BadPri),
            (b"<13>0 - - - - - -", ParseError::BadVersion),
            (b"<13>1 - host app", ParseError::Truncated),
            (b"<13>1 yesterday h a p m -", ParseError::BadTimestamp),
            (b"<13>1 - h a p m [x", ParseError::BadStructuredData),
            (b"<13>1 - h a p m [x a=\"1]", ParseError::BadStructuredData),
            (b"<13>1 - h a p m nosd", ParseError::BadStructuredData),
            (
                b"<13>1 - h a p 0123456789012345678901234567890123 -",
                ParseError::BadField {
                    field: "msgid",
                    max: MSGID_LEN_MAX,
                },
            ),
        ];
        for (line, want) in cases {
            assert_eq!(
                parse(line, NOW).err(),
                Some(*want),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        // Escaped quote and bracket inside a value are part of it.
        assert!(parse(br#"<13>1 - h a p m [x a="q\"\]" b="2"] msg"#, NOW).is_ok());
    }

    #[test]
    fn rfc3164_variants_parse() {
        // Proves the BSD forms seen in practice: with hostname, without (local logger),
        // tag with and without pid, rsyslog's RFC 3339 forwarding format.
        let m = parse(
            b"<34>Oct 11 22:14:15 mymachine su[123]: 'su root' failed",
            NOW,
        )
        .unwrap();
        assert_eq!(m.format, Format::Rfc3164);
        assert_eq!(m.hostname, Some(&b"mymachine"[..]));
        assert_eq!(m.app_name, Some(&b"su"[..]));
        assert_eq!(m.procid, Some(&b"123"[..]));
        // Oct 11 of the receive year (2026), UTC.
        assert_eq!(m.timestamp_ms, Some(1_791_756_855_000));

        let m = parse(b"<13>Nov  3 01:02:03 alice: hello", NOW).unwrap();
        assert_eq!(m.hostname, None);
        assert_eq!(m.app_name, Some(&b"alice"[..]));

        let m = parse(
            b"<86>2026-11-30T21:59:58.123+00:00 web01 sshd[42]: Accepted",
            NOW,
        )
        .unwrap();
        assert_eq!(m.hostname, Some(&b"web01"[..]));
        assert_eq!(m.procid, Some(&b"42"[..]));
        assert_eq!(m.timestamp_ms, Some(NOW - 1877));

        let m = parse(b"<13>Nov 30 21:00:00 host just a message", NOW).unwrap();
        assert_eq!(m.app_name, None);

        assert_eq!(
            parse(b"<13>no timestamp here", NOW).err(),
            Some(ParseError::NoTimestamp)
        );
    }

    #[test]
    fn rfc3164_december_line_received_in_january_is_last_year() {
        // Proves the year rule: a timestamp more than a day ahead belongs to last year.
        let jan_2027 = days_from_civil(2027, 1, 1) * 86_400_000 + 3_600_000;
        let m = parse(b"<13>Dec 31 23:59:59 h a: x", jan_2027).unwrap();
        assert_eq!(
            m.timestamp_ms,
            Some(days_from_civil(2026, 12, 31) * 86_400_000 + 86_399_000)
        );
    }

    #[test]
    fn names_round_trip() {
        // Proves every facility number maps to a name and back; severities are named.
        for f in 0..24u8 {
            assert_eq!(facility_from_name(facility_name(f)), Some(f));
        }
        assert_eq!(facility_from_name("LOCAL0"), Some(16));
        assert_eq!(facility_from_name("24"), None);
        assert_eq!(severity_name(6), "info");
        assert_eq!(severity_name(9), "unknown");
    }

    proptest! {
        #[test]
        fn never_panics(line in proptest::collection::vec(any::<u8>(), 0..300)) {
            // Proves any bytes parse or fail with a typed error, never a panic.
            let _ = parse(&line, NOW);
        }

        #[test]
        fn rfc5424_fields_round_trip(
            pri in 0u8..192,
            ms in 0i64..4_102_444_800_000,
            host in "[!-~]{1,40}",
            app in "[!-~]{1,48}",
            procid in "[0-9]{1,8}",
            msgid in "[A-Za-z0-9]{1,32}",
            msg in "[ -~]{0,60}",
        ) {
            // Proves a message built from arbitrary valid fields parses back to them.
            let days = ms.div_euclid(86_400_000);
            let (y, mo, d) = civil_from_days(days);
            let in_day = ms.rem_euclid(86_400_000);
            let line = format!(
                "<{pri}>1 {y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z {host} {app} {procid} {msgid} - {msg}",
                in_day / 3_600_000, in_day / 60_000 % 60, in_day / 1000 % 60, in_day % 1000,
            );
            let m = parse(line.as_bytes(), NOW).unwrap();
            prop_assert_eq!(m.facility, pri / 8);
            prop_assert_eq!(m.severity, pri % 8);
            prop_assert_eq!(m.timestamp_ms, Some(ms));
            prop_assert_eq!(m.hostname, (host != "-").then_some(host.as_bytes()));
            prop_assert_eq!(m.app_name, (app != "-").then_some(app.as_bytes()));
            prop_assert_eq!(m.procid, Some(procid.as_bytes()));
            prop_assert_eq!(m.msgid, Some(msgid.as_bytes()));
        }

        #[test]
        fn civil_dates_round_trip(days in -1_000_000i64..1_000_000) {
            // Proves the date arithmetic is a bijection over a wide range.
            let (y, m, d) = civil_from_days(days);
            prop_assert_eq!(days_from_civil(y, m, d), days);
        }
    }
}
