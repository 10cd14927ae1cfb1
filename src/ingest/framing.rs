//! RFC 6587: syslog messages over a byte stream (TCP), framed either by octet counting
//! (`MSG-LEN SP MSG`) or by a trailing newline ("non-transparent framing").
//!
//! The method is decided per frame by its first byte, as rsyslog's imtcp does: a digit
//! starts an octet count (a syslog message itself starts with `<`), anything else runs to
//! the next LF. So one connection may mix both, and a sender need not announce which.
//!
//! Bounds: a frame longer than `frame_bytes_max` is not buffered whole. Its first
//! `frame_bytes_max` bytes are handed out as a frame marked `truncated` (the record keeps
//! what fits, and says so), and the rest is skipped up to the frame's end (the count, or the
//! next LF). An octet count that is not a number (or longer than 9 digits) cannot be
//! resynchronised and is an error: the connection is closed.
//!
//! The frame handed out is the message without framing: no count, no space after it, no
//! LF, and no CR before the LF (an octet-counted frame's own trailing LF or CRLF, inside its
//! count, is dropped too). Empty lines are skipped.
use bytes::{Buf, Bytes, BytesMut};
use thiserror::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum FramingError {
    #[error("octet count is not a number of at most 9 digits followed by a space")]
    BadOctetCount,
}

/// One message taken off the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub message: Bytes,
    /// The sender's message was longer than the bound and was cut.
    pub truncated: bool,
}

/// Longest octet count accepted, in digits (a 9-digit count is under 1 GB).
const OCTET_COUNT_DIGITS_MAX: usize = 9;

/// The RFC 6587 decoder of one connection.
#[derive(Debug)]
pub struct Deframer {
    frame_bytes_max: usize,
    /// Bytes of an over-long frame still to skip: a count of bytes (octet counting), or up
    /// to the next LF.
    skipping: Skip,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Skip {
    Nothing,
    Bytes(usize),
    ToNewline,
}

impl Deframer {
    pub fn new(frame_bytes_max: usize) -> Self {
        Self {
            frame_bytes_max: frame_bytes_max.max(1),
            skipping: Skip::Nothing,
        }
    }

    /// Takes the next frame out of `buf`; `Ok(None)` when `buf` holds no complete one (read
    /// more, then call again). Bytes of an unfinished frame stay in `buf`, at most
    /// `frame_bytes_max` plus the count's digits.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FramingError> {
        loop {
            match self.skipping {
                Skip::Bytes(n) => {
                    let skip = n.min(buf.len());
                    buf.advance(skip);
                    if skip < n {
                        self.skipping = Skip::Bytes(n - skip);
                        return Ok(None);
                    }
                    self.skipping = Skip::Nothing;
                }
                Skip::ToNewline => match memchr(b'\n', buf) {
                    Some(at) => {
                        buf.advance(at + 1);
                        self.skipping = Skip::Nothing;
                    }
                    None => {
                        buf.clear();
                        return Ok(None);
                    }
                },
                Skip::Nothing => {}
            }
            let Some(&first) = buf.first() else {
                return Ok(None);
            };
            let frame = if first.is_ascii_digit() {
                self.octet_counted(buf)?
            } else {
                self.newline(buf)
            };
            match frame {
                Some(f) if f.message.is_empty() => continue,
                other => return Ok(other),
            }
        }
    }

    fn octet_counted(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FramingError> {
        let digits = buf
            .iter()
            .take(OCTET_COUNT_DIGITS_MAX + 1)
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits > OCTET_COUNT_DIGITS_MAX || buf.first() == Some(&b'0') {
            return Err(FramingError::BadOctetCount);
        }
        match buf.get(digits) {
            None => return Ok(None),
            Some(b' ') => {}
            Some(_) => return Err(FramingError::BadOctetCount),
        }
        let len = buf
            .get(..digits)
            .unwrap_or_default()
            .iter()
            .fold(0usize, |n, &d| n * 10 + usize::from(d - b'0'));
        let header = digits + 1;
        if len > self.frame_bytes_max {
            // Keep the first frame_bytes_max bytes, skip the rest once they arrive.
            if buf.len() < header + self.frame_bytes_max {
                return Ok(None);
            }
            buf.advance(header);
            let message = buf.split_to(self.frame_bytes_max).freeze();
            self.skipping = Skip::Bytes(len - self.frame_bytes_max);
            return Ok(Some(Frame {
                message,
                truncated: true,
            }));
        }
        if buf.len() < header + len {
            return Ok(None);
        }
        buf.advance(header);
        Ok(Some(Frame {
            message: without_line_end(buf.split_to(len)).freeze(),
            truncated: false,
        }))
    }

    fn newline(&mut self, buf: &mut BytesMut) -> Option<Frame> {
        let window = buf.len().min(self.frame_bytes_max + 2);
        match memchr(b'\n', buf.get(..window).unwrap_or_default()) {
            Some(at) => {
                let line = buf.split_to(at + 1);
                let mut line = without_line_end(line);
                let truncated = line.len() > self.frame_bytes_max;
                line.truncate(self.frame_bytes_max);
                Some(Frame {
                    message: line.freeze(),
                    truncated,
                })
            }
            None if buf.len() > self.frame_bytes_max => {
                let message = buf.split_to(self.frame_bytes_max).freeze();
                self.skipping = Skip::ToNewline;
                Some(Frame {
                    message,
                    truncated: true,
                })
            }
            None => None,
        }
    }
}

/// `message` without one trailing LF or CRLF. An octet-counted frame may carry one inside
/// its count (syslog-ng's syslog() destination sends `LEN MSG\n`); it is framing, not
/// message, as rsyslog's imtcp also drops it.
fn without_line_end(mut message: BytesMut) -> BytesMut {
    if message.last() == Some(&b'\n') {
        message.truncate(message.len() - 1);
        if message.last() == Some(&b'\r') {
            message.truncate(message.len() - 1);
        }
    }
    message
}

fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|&b| b == needle)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use proptest::prelude::*;

    fn all(deframer: &mut Deframer, input: &[u8]) -> Vec<(Vec<u8>, bool)> {
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(f) = deframer.decode(&mut buf).unwrap() {
            out.push((f.message.to_vec(), f.truncated));
        }
        out
    }

    #[test]
    fn an_octet_counted_frames_trailing_line_end_is_framing() {
        // Proves `LEN MSG\n` (syslog-ng's syslog() destination) and `LEN MSG\r\n` give MSG,
        // while a LF inside the message stays.
        let mut d = Deframer::new(100);
        let got = all(&mut d, b"6 <13>a\n7 <13>b\r\n7 <13>\nc\n");
        let want: Vec<(Vec<u8>, bool)> = vec![
            (b"<13>a".to_vec(), false),
            (b"<13>b".to_vec(), false),
            (b"<13>\nc".to_vec(), false),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn newline_and_octet_counting_mix_on_one_connection() {
        // Proves per-frame detection: LF-framed, CRLF-framed and octet-counted messages on
        // one stream come out without their framing, empty lines skipped.
        let mut d = Deframer::new(100);
        let got = all(&mut d, b"<13>a\n\n<13>b\r\n5 <13>c<13>d\n");
        let want: Vec<(Vec<u8>, bool)> = vec![
            (b"<13>a".to_vec(), false),
            (b"<13>b".to_vec(), false),
            (b"<13>c".to_vec(), false),
            (b"<13>d".to_vec(), false),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn long_frames_are_cut_and_the_stream_resynchronises() {
        // Proves an over-long frame yields its first frame_bytes_max bytes marked truncated,
        // and the next frame after it comes out whole, for both framings.
        let mut d = Deframer::new(4);
        let got = all(&mut d, b"abcdefgh\nxy\n10 0123456789ok\n");
        assert_eq!(
            got,
            vec![
                (b"abcd".to_vec(), true),
                (b"xy".to_vec(), false),
                (b"0123".to_vec(), true),
                (b"ok".to_vec(), false),
            ]
        );
    }

    #[test]
    fn bad_octet_counts_are_errors() {
        // Proves a count that cannot be a count closes the stream instead of guessing.
        for input in [&b"12x <13>"[..], b"0 x", b"1234567890 x"] {
            let mut buf = BytesMut::from(input);
            assert_eq!(
                Deframer::new(100).decode(&mut buf),
                Err(FramingError::BadOctetCount)
            );
        }
    }

    proptest! {
        #[test]
        fn any_split_gives_the_same_frames(
            msgs in proptest::collection::vec(("<[0-9]{1,3}>[ -~]{0,40}", any::<bool>()), 1..20),
            cuts in proptest::collection::vec(0usize..2000, 0..10),
        ) {
            // Proves frames do not depend on how the stream is cut into reads.
            let mut stream = Vec::new();
            for (m, counted) in &msgs {
                if *counted {
                    stream.extend_from_slice(format!("{} {m}", m.len()).as_bytes());
                } else {
                    stream.extend_from_slice(m.as_bytes());
                    stream.push(b'\n');
                }
            }
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (stream.len() + 1)).collect();
            cuts.sort_unstable();
            let mut d = Deframer::new(1000);
            let mut buf = BytesMut::new();
            let mut got = Vec::new();
            let mut from = 0;
            for cut in cuts.into_iter().chain([stream.len()]) {
                buf.extend_from_slice(&stream[from..cut]);
                from = cut;
                while let Some(f) = d.decode(&mut buf).unwrap() {
                    got.push(String::from_utf8(f.message.to_vec()).unwrap());
                }
            }
            let want: Vec<String> = msgs.into_iter().map(|(m, _)| m).collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn never_panics_and_stays_bounded(input in proptest::collection::vec(any::<u8>(), 0..500)) {
            // Proves any bytes give frames or an error, and no frame exceeds the bound.
            let mut d = Deframer::new(16);
            let mut buf = BytesMut::from(&input[..]);
            while let Ok(Some(f)) = d.decode(&mut buf) {
                prop_assert!(f.message.len() <= 16);
            }
        }
    }
}
