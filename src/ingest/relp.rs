//! RELP, the Reliable Event Logging Protocol of rsyslog (omrelp/imrelp, librelp), server
//! side.
//!
//! A frame is `TXNR SP COMMAND SP DATALEN [SP DATA] LF`: a transaction number (1 to
//! 999,999,999, each one the previous plus one, wrapping to 1), a command of letters, the
//! data's length in bytes and the data. The client opens the session (`open`, offering
//! `relp_version`, `relp_software` and `commands`), sends messages (`syslog`) and closes it
//! (`close`); the server answers every frame with `TXNR rsp LEN CODE TEXT[ LF DATA]`, `200
//! OK` or `500` and a reason. A message the client has no `200` for is sent again after a
//! reconnect, so the server answers `200` only once the message is durable: the listener
//! calls [`encode_rsp`] when its record's append has completed, in transaction order.
//!
//! The window: a client has at most its window (128 by default in librelp) of messages
//! unanswered. The session counts the messages it handed out and not yet answered and
//! refuses a client past `window_max` (the listener stops reading at that point, so only a
//! client that ignores the protocol gets there).
//!
//! [`RelpSession`] is the state machine (frames in, actions out); [`decode_frame`] the
//! framing. Neither does I/O.
use bytes::{Buf, Bytes, BytesMut};
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RelpError {
    #[error("malformed RELP frame header")]
    BadHeader,
    #[error("RELP frame of {len} bytes is over the {max}-byte bound")]
    TooLarge { len: usize, max: usize },
    #[error("RELP frame has no LF trailer")]
    NoTrailer,
    #[error("RELP transaction number {got} out of sequence (expected {expected})")]
    OutOfSequence { got: u32, expected: u32 },
    #[error("RELP command {0:?} before the session was opened")]
    NotOpen(String),
    #[error("RELP client sent a second open")]
    AlreadyOpen,
    #[error("RELP client has more than {max} messages unanswered")]
    WindowExceeded { max: usize },
    #[error("RELP client does not offer the syslog command")]
    Unsupported,
}

/// Largest transaction number; the next one is 1.
pub const TXNR_MAX: u32 = 999_999_999;
/// Longest command word RELP allows.
const COMMAND_LEN_MAX: usize = 32;
/// Digits of TXNR and DATALEN (RELP: at most 9).
const NUMBER_DIGITS_MAX: usize = 9;

/// One frame from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub txnr: u32,
    pub command: Bytes,
    pub data: Bytes,
}

/// Takes one frame off `buf`; `Ok(None)` when incomplete. `data_bytes_max` bounds DATALEN:
/// a larger frame is an error (the session cannot skip it safely, since its answer must say
/// whether it was kept).
pub fn decode_frame(buf: &mut BytesMut, data_bytes_max: usize) -> Result<Option<Frame>, RelpError> {
    // TXNR SP
    let Some((txnr, after_txnr)) = number_then(buf, 0, b' ')? else {
        return Ok(None);
    };
    // COMMAND SP
    let command_len = run_length(buf, after_txnr, COMMAND_LEN_MAX, u8::is_ascii_alphabetic);
    let after_command = after_txnr + command_len;
    match buf.get(after_command) {
        None if command_len <= COMMAND_LEN_MAX => return Ok(None),
        Some(b' ') if (1..=COMMAND_LEN_MAX).contains(&command_len) => {}
        _ => return Err(RelpError::BadHeader),
    }
    // DATALEN, then SP DATA LF, or LF directly when DATALEN is 0.
    let len_from = after_command + 1;
    let digits = run_length(buf, len_from, NUMBER_DIGITS_MAX, u8::is_ascii_digit);
    if digits > NUMBER_DIGITS_MAX {
        return Err(RelpError::BadHeader);
    }
    let Some(&after_len_byte) = buf.get(len_from + digits) else {
        return Ok(None);
    };
    if digits == 0 {
        return Err(RelpError::BadHeader);
    }
    let len = decimal(buf.get(len_from..len_from + digits).unwrap_or_default());
    if len > data_bytes_max {
        return Err(RelpError::TooLarge {
            len,
            max: data_bytes_max,
        });
    }
    let data_from = match (len, after_len_byte) {
        (0, b'\n') => len_from + digits,
        (_, b' ') => len_from + digits + 1,
        _ => return Err(RelpError::BadHeader),
    };
    let Some(&trailer) = buf.get(data_from + len) else {
        return Ok(None);
    };
    if trailer != b'\n' {
        return Err(RelpError::NoTrailer);
    }
    let mut frame = buf.split_to(data_from + len + 1).freeze();
    let command = frame.slice(after_txnr..after_command);
    frame.advance(data_from);
    frame.truncate(len);
    Ok(Some(Frame {
        txnr,
        command,
        data: frame,
    }))
}

/// A number of 1 to 9 digits at `from`, then `sep`; `None` when more bytes are needed.
fn number_then(buf: &[u8], from: usize, sep: u8) -> Result<Option<(u32, usize)>, RelpError> {
    let rest = buf.get(from..).unwrap_or_default();
    let digits = run_length(buf, from, NUMBER_DIGITS_MAX, u8::is_ascii_digit);
    if digits > NUMBER_DIGITS_MAX {
        return Err(RelpError::BadHeader);
    }
    match rest.get(digits) {
        None => Ok(None),
        Some(&b) if b == sep && digits > 0 => {
            let n = decimal(rest.get(..digits).unwrap_or_default());
            let n = u32::try_from(n).map_err(|_| RelpError::BadHeader)?;
            Ok(Some((n, from + digits + 1)))
        }
        Some(_) => Err(RelpError::BadHeader),
    }
}

/// How many bytes from `from` satisfy `is`, counting at most `max + 1` (so a caller sees a
/// run longer than `max` without scanning all of it).
fn run_length(buf: &[u8], from: usize, max: usize, is: fn(&u8) -> bool) -> usize {
    buf.get(from..)
        .unwrap_or_default()
        .iter()
        .take(max + 1)
        .take_while(|b| is(b))
        .count()
}

/// At most 9 digits, so no overflow.
fn decimal(digits: &[u8]) -> usize {
    digits.iter().fold(0usize, |n, &d| {
        n * 10 + usize::from(d.wrapping_sub(b'0') % 10)
    })
}

/// What the listener must do for a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send these bytes now (the answer to `open`).
    Reply(Bytes),
    /// Store this message; answer `txnr` with [`encode_rsp`] once it is durable (or failed).
    Deliver { txnr: u32, message: Bytes },
    /// Answer every message still pending, then send these bytes and close the connection.
    Close(Bytes),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Opening,
    Open,
    Closed,
}

/// One RELP session, server side.
#[derive(Debug)]
pub struct RelpSession {
    state: State,
    /// The transaction number the next frame must carry (0: any, before the first frame).
    expected_txnr: u32,
    unanswered: usize,
    window_max: usize,
    data_bytes_max: usize,
}

impl RelpSession {
    pub fn new(data_bytes_max: usize, window_max: usize) -> Self {
        Self {
            state: State::Opening,
            expected_txnr: 0,
            unanswered: 0,
            window_max,
            data_bytes_max,
        }
    }

    pub fn data_bytes_max(&self) -> usize {
        self.data_bytes_max
    }

    /// Messages handed out with `Deliver` and not yet answered.
    pub fn unanswered(&self) -> usize {
        self.unanswered
    }

    /// The listener answered one delivered message.
    pub fn handle_answered(&mut self) {
        self.unanswered = self.unanswered.saturating_sub(1);
    }

    /// Takes one frame; an error means the connection must be closed (after sending
    /// [`server_close`] if it can).
    pub fn handle(&mut self, frame: Frame) -> Result<Action, RelpError> {
        if self.state == State::Closed {
            return Err(RelpError::NotOpen(
                String::from_utf8_lossy(&frame.command).into(),
            ));
        }
        if self.expected_txnr != 0 && frame.txnr != self.expected_txnr {
            return Err(RelpError::OutOfSequence {
                got: frame.txnr,
                expected: self.expected_txnr,
            });
        }
        if frame.txnr == 0 || frame.txnr > TXNR_MAX {
            return Err(RelpError::BadHeader);
        }
        self.expected_txnr = if frame.txnr == TXNR_MAX {
            1
        } else {
            frame.txnr + 1
        };
        match (&frame.command[..], self.state) {
            (b"open", State::Opening) => {
                if !offers_syslog(&frame.data) {
                    return Err(RelpError::Unsupported);
                }
                self.state = State::Open;
                Ok(Action::Reply(encode_rsp(
                    frame.txnr,
                    200,
                    "OK\nrelp_version=0\nrelp_software=strata\ncommands=syslog",
                )))
            }
            (b"open", State::Open) => Err(RelpError::AlreadyOpen),
            (b"syslog", State::Open) => {
                if self.unanswered >= self.window_max {
                    return Err(RelpError::WindowExceeded {
                        max: self.window_max,
                    });
                }
                self.unanswered += 1;
                Ok(Action::Deliver {
                    txnr: frame.txnr,
                    message: frame.data,
                })
            }
            (b"close", State::Open) => {
                self.state = State::Closed;
                Ok(Action::Close(encode_rsp(frame.txnr, 200, "OK")))
            }
            (other, _) => Err(RelpError::NotOpen(String::from_utf8_lossy(other).into())),
        }
    }
}

/// Whether an `open` offers the `syslog` command. The `relp_version` offered is not
/// checked: every librelp release speaks the version-0 frames answered here.
fn offers_syslog(data: &[u8]) -> bool {
    data.split(|&b| b == b'\n')
        .filter_map(|line| line.strip_prefix(b"commands="))
        .any(|commands| commands.split(|&b| b == b',').any(|c| c == b"syslog"))
}

/// `TXNR rsp LEN CODE TEXT LF`.
pub fn encode_rsp(txnr: u32, code: u16, text: &str) -> Bytes {
    let body = format!("{code} {text}");
    Bytes::from(format!("{txnr} rsp {} {body}\n", body.len()))
}

/// The server's hint that it is closing the session (txnr 0, as librelp sends it).
pub fn server_close() -> Bytes {
    Bytes::from_static(b"0 serverclose 0\n")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use proptest::prelude::*;

    fn frame(s: &[u8]) -> Frame {
        decode_frame(&mut BytesMut::from(s), 1024).unwrap().unwrap()
    }

    #[test]
    fn a_session_opens_delivers_and_closes() {
        // Proves the whole exchange librelp's client performs, with the answers it expects.
        let mut s = RelpSession::new(1024, 2);
        let offers = "relp_version=0\nrelp_software=librelp,1.11.0,http://librelp.adiscon.com\ncommands=syslog";
        let open = format!("1 open {} {offers}\n", offers.len());
        match s.handle(frame(open.as_bytes())).unwrap() {
            Action::Reply(r) => {
                assert!(r.starts_with(b"1 rsp "), "{r:?}");
                assert!(r.windows(6).any(|w| w == b"200 OK"));
                assert!(r.ends_with(b"commands=syslog\n"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            s.handle(frame(b"2 syslog 5 <13>x\n")).unwrap(),
            Action::Deliver {
                txnr: 2,
                message: Bytes::from_static(b"<13>x")
            }
        );
        assert_eq!(s.unanswered(), 1);
        s.handle_answered();
        assert_eq!(
            s.handle(frame(b"3 close 0\n")).unwrap(),
            Action::Close(Bytes::from_static(b"3 rsp 6 200 OK\n"))
        );
    }

    #[test]
    fn protocol_violations_are_errors() {
        // Proves syslog before open, a skipped txnr and a window overrun each end the session.
        let mut s = RelpSession::new(1024, 1);
        assert!(matches!(
            s.handle(frame(b"1 syslog 1 x\n")),
            Err(RelpError::NotOpen(_))
        ));
        let mut s = RelpSession::new(1024, 1);
        s.handle(frame(b"1 open 15 commands=syslog\n")).unwrap();
        assert_eq!(
            s.handle(frame(b"3 syslog 1 x\n")),
            Err(RelpError::OutOfSequence {
                got: 3,
                expected: 2
            })
        );
        let mut s = RelpSession::new(1024, 1);
        s.handle(frame(b"1 open 15 commands=syslog\n")).unwrap();
        s.handle(frame(b"2 syslog 1 x\n")).unwrap();
        assert_eq!(
            s.handle(frame(b"3 syslog 1 y\n")),
            Err(RelpError::WindowExceeded { max: 1 })
        );
        let mut s = RelpSession::new(1024, 1);
        assert_eq!(
            s.handle(frame(b"1 open 12 commands=foo\n")),
            Err(RelpError::Unsupported)
        );
    }

    #[test]
    fn frame_errors() {
        // Proves malformed headers, a missing trailer and an oversized frame are refused,
        // and an incomplete frame asks for more bytes.
        let d = |s: &[u8]| decode_frame(&mut BytesMut::from(s), 8);
        assert_eq!(d(b"x open 0\n"), Err(RelpError::BadHeader));
        assert_eq!(d(b"1 op3n 0\n"), Err(RelpError::BadHeader));
        assert_eq!(d(b"1 syslog 2 abX"), Err(RelpError::NoTrailer));
        assert_eq!(
            d(b"1 syslog 9 "),
            Err(RelpError::TooLarge { len: 9, max: 8 })
        );
        assert_eq!(d(b"1 syslog 3 ab"), Ok(None));
        assert_eq!(d(b"12"), Ok(None));
        assert_eq!(d(b"1 close 0"), Ok(None));
    }

    #[test]
    fn txnr_wraps_to_one() {
        // Proves the sequence after 999,999,999 is 1, as RELP specifies.
        let mut s = RelpSession::new(64, 4);
        s.handle(frame(b"999999999 open 15 commands=syslog\n"))
            .unwrap();
        assert!(s.handle(frame(b"1 syslog 1 x\n")).is_ok());
    }

    proptest! {
        #[test]
        fn frames_survive_any_split(
            msgs in proptest::collection::vec("[ -~]{0,50}", 1..20),
            cut in 0usize..5000,
        ) {
            // Proves a stream of frames decodes the same however it is split in two reads.
            let mut stream = Vec::new();
            for (i, m) in msgs.iter().enumerate() {
                if m.is_empty() {
                    stream.extend_from_slice(format!("{} syslog 0\n", i + 1).as_bytes());
                } else {
                    stream.extend_from_slice(format!("{} syslog {} {m}\n", i + 1, m.len()).as_bytes());
                }
            }
            let cut = cut % (stream.len() + 1);
            let mut buf = BytesMut::from(&stream[..cut]);
            let mut got = Vec::new();
            while let Some(f) = decode_frame(&mut buf, 100).unwrap() {
                got.push(f);
            }
            buf.extend_from_slice(&stream[cut..]);
            while let Some(f) = decode_frame(&mut buf, 100).unwrap() {
                got.push(f);
            }
            prop_assert_eq!(got.len(), msgs.len());
            for (i, (f, m)) in got.iter().zip(&msgs).enumerate() {
                prop_assert_eq!(f.txnr as usize, i + 1);
                prop_assert_eq!(&f.data[..], m.as_bytes());
            }
        }

        #[test]
        fn never_panics(input in proptest::collection::vec(any::<u8>(), 0..300)) {
            // Proves any bytes give frames, a need for more, or an error.
            let mut buf = BytesMut::from(&input[..]);
            let mut s = RelpSession::new(64, 4);
            while let Ok(Some(f)) = decode_frame(&mut buf, 64) {
                if s.handle(f).is_err() { break; }
            }
        }
    }
}
