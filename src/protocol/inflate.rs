//! Bounded decompression of a record batch's records section (gzip, snappy, lz4, zstd).
//!
//! A few hundred bytes of gzip or zstd can claim gigabytes of output (a decompression bomb).
//! Every codec here is run as a stream that hands its output to a sink piece by piece and
//! stops as soon as the output passes the caller's bound, so the memory a hostile batch can
//! make the broker allocate is the bound (when the caller keeps the output) or a fixed
//! scratch buffer (when it only counts, as the produce path does), never what the batch
//! claims. Pure functions over bytes: no I/O.
//!
//! Framing, as Kafka's clients write it: gzip is RFC 1952, possibly several members back to
//! back (Java's GZIPInputStream reads them all); lz4 is the LZ4 frame format; zstd is one or
//! more zstd frames; snappy is either one raw snappy block or xerial's framing (a 16-byte
//! magic header, then blocks of a big-endian u32 length and a raw snappy block).
use std::io::Read;

use super::record_batch::{
    BatchError, RecordsError, CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY, CODEC_ZSTD,
};

/// Bytes of output handed to the sink at a time (and the scratch buffer of a counting pass).
pub const INFLATE_CHUNK_BYTES: usize = 64 * 1024;

/// The largest zstd window (as a power of two) a batch may ask the decoder to allocate.
/// zstd's own default limit is 2^27 (128 MiB); Kafka producers' levels use at most 2^23 for
/// batches of their size. A frame asking more is refused rather than allocated.
pub const ZSTD_WINDOW_LOG_MAX: u32 = 24;

/// How much larger than its input a raw snappy block can possibly decode to: the densest
/// element is a 3-byte copy of 64 bytes (21.3x). A block claiming more is corrupt, and is
/// refused before its claimed length is allocated.
const SNAPPY_EXPANSION_MAX: usize = 22;

/// xerial's snappy stream header, as Kafka's Java client writes it.
const SNAPPY_XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
/// The full xerial header: magic, then version and compatible-version (u32 each).
const SNAPPY_XERIAL_HEADER_LEN: usize = 16;

/// Decompresses `payload` (the records section of a batch compressed with `codec`) into
/// `sink`, piece by piece, and returns the decompressed length. Fails with
/// [`RecordsError::TooLarge`] as soon as the output would pass `max` bytes, before the rest
/// is produced; with [`RecordsError::Decompress`] when the payload is not valid for its codec.
pub fn inflate(
    codec: i16,
    payload: &[u8],
    max: usize,
    sink: &mut dyn FnMut(&[u8]),
) -> Result<usize, RecordsError> {
    let mut out = Bounded {
        written: 0,
        max,
        sink,
    };
    match codec {
        CODEC_GZIP => read_all(codec, flate2::read::MultiGzDecoder::new(payload), &mut out)?,
        CODEC_ZSTD => {
            let mut decoder = zstd::stream::read::Decoder::with_buffer(payload)
                .map_err(|e| decompress_error(codec, &e))?;
            decoder
                .window_log_max(ZSTD_WINDOW_LOG_MAX)
                .map_err(|e| decompress_error(codec, &e))?;
            read_all(codec, decoder, &mut out)?
        }
        CODEC_LZ4 => {
            let decoder = lz4::Decoder::new(payload).map_err(|e| decompress_error(codec, &e))?;
            read_all(codec, decoder, &mut out)?
        }
        CODEC_SNAPPY => snappy(payload, &mut out)?,
        other => return Err(BatchError::BadCompression(other).into()),
    }
    Ok(out.written)
}

/// Counts the decompressed length of `payload` without keeping it (a fixed scratch buffer),
/// failing as [`inflate`] does.
pub fn inflated_len(codec: i16, payload: &[u8], max: usize) -> Result<usize, RecordsError> {
    inflate(codec, payload, max, &mut |_| {})
}

/// The output side: counts and forwards, refusing past the bound.
struct Bounded<'a> {
    written: usize,
    max: usize,
    sink: &'a mut dyn FnMut(&[u8]),
}

impl Bounded<'_> {
    fn put(&mut self, piece: &[u8]) -> Result<(), RecordsError> {
        let len = self.written.saturating_add(piece.len());
        if len > self.max {
            return Err(RecordsError::TooLarge { len, max: self.max });
        }
        self.written = len;
        (self.sink)(piece);
        Ok(())
    }

    /// Bytes that may still be written.
    fn room(&self) -> usize {
        self.max - self.written
    }
}

fn decompress_error(codec: i16, e: &dyn std::fmt::Display) -> RecordsError {
    RecordsError::Decompress {
        codec,
        message: e.to_string(),
    }
}

/// Pumps a streaming decoder through `out` a chunk at a time.
fn read_all(codec: i16, mut decoder: impl Read, out: &mut Bounded<'_>) -> Result<(), RecordsError> {
    let mut chunk = vec![0u8; INFLATE_CHUNK_BYTES];
    loop {
        match decoder.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => out.put(chunk.get(..n).unwrap_or_default())?,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(decompress_error(codec, &e)),
        }
    }
}

/// Raw snappy or xerial-framed snappy, one block at a time; a block's claimed length is
/// checked against the bound and against what its input can decode to before it is allocated.
fn snappy(payload: &[u8], out: &mut Bounded<'_>) -> Result<(), RecordsError> {
    if payload.is_empty() {
        return Err(decompress_error(
            CODEC_SNAPPY,
            &"no bytes in the snappy stream",
        ));
    }
    let mut scratch = Vec::new();
    if !payload.starts_with(SNAPPY_XERIAL_MAGIC) {
        return snappy_block(payload, &mut scratch, out);
    }
    let mut rest = payload
        .get(SNAPPY_XERIAL_HEADER_LEN..)
        .ok_or_else(|| decompress_error(CODEC_SNAPPY, &"truncated xerial header"))?;
    while !rest.is_empty() {
        let (len, tail) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| decompress_error(CODEC_SNAPPY, &"truncated block length"))?;
        let len = u32::from_be_bytes(*len) as usize;
        let block = tail
            .get(..len)
            .ok_or_else(|| decompress_error(CODEC_SNAPPY, &"truncated block"))?;
        snappy_block(block, &mut scratch, out)?;
        rest = tail.get(len..).unwrap_or_default();
    }
    Ok(())
}

fn snappy_block(
    block: &[u8],
    scratch: &mut Vec<u8>,
    out: &mut Bounded<'_>,
) -> Result<(), RecordsError> {
    let claimed =
        snap::raw::decompress_len(block).map_err(|e| decompress_error(CODEC_SNAPPY, &e))?;
    if claimed > out.room() {
        return Err(RecordsError::TooLarge {
            len: out.written.saturating_add(claimed),
            max: out.max,
        });
    }
    if claimed > block.len().saturating_mul(SNAPPY_EXPANSION_MAX) {
        return Err(decompress_error(
            CODEC_SNAPPY,
            &format!(
                "a block of {} bytes claims {claimed} bytes decompressed",
                block.len()
            ),
        ));
    }
    scratch.clear();
    scratch.resize(claimed, 0);
    let n = snap::raw::Decoder::new()
        .decompress(block, scratch)
        .map_err(|e| decompress_error(CODEC_SNAPPY, &e))?;
    out.put(scratch.get(..n).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(data).expect("gzip");
        e.finish().expect("gzip")
    }

    /// `len` zero bytes compressed with `codec` by the same code Kafka clients' bytes come
    /// from (kafka-protocol's compressors), streamed in so the test itself stays small.
    fn bomb(codec: i16, len: usize) -> Vec<u8> {
        match codec {
            CODEC_GZIP => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
                let zeros = vec![0u8; 1 << 20];
                for _ in 0..len >> 20 {
                    e.write_all(&zeros).expect("gzip");
                }
                e.finish().expect("gzip")
            }
            CODEC_ZSTD => {
                let mut e = zstd::stream::write::Encoder::new(Vec::new(), 19).expect("zstd");
                let zeros = vec![0u8; 1 << 20];
                for _ in 0..len >> 20 {
                    e.write_all(&zeros).expect("zstd");
                }
                e.finish().expect("zstd")
            }
            CODEC_LZ4 => {
                let mut e = lz4::EncoderBuilder::new().build(Vec::new()).expect("lz4");
                let zeros = vec![0u8; 1 << 20];
                for _ in 0..len >> 20 {
                    e.write_all(&zeros).expect("lz4");
                }
                let (v, r) = e.finish();
                r.expect("lz4");
                v
            }
            _ => {
                // xerial framing of 32 KiB blocks, as Kafka's Java client writes it.
                let mut v = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01".to_vec();
                let block = snap::raw::Encoder::new()
                    .compress_vec(&vec![0u8; 32 * 1024])
                    .expect("snappy");
                for _ in 0..len / (32 * 1024) {
                    v.extend_from_slice(&(block.len() as u32).to_be_bytes());
                    v.extend_from_slice(&block);
                }
                v
            }
        }
    }

    #[test]
    fn every_codec_round_trips_under_the_bound() {
        // Proves inflate gives back exactly what each codec compressed, when it fits the bound.
        let data: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_be_bytes())
            .collect();
        for codec in [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD] {
            let compressed = match codec {
                CODEC_GZIP => gzip(&data),
                CODEC_SNAPPY => snap::raw::Encoder::new()
                    .compress_vec(&data)
                    .expect("snappy"),
                CODEC_LZ4 => {
                    let mut e = lz4::EncoderBuilder::new().build(Vec::new()).expect("lz4");
                    e.write_all(&data).expect("lz4");
                    e.finish().0
                }
                _ => zstd::encode_all(&data[..], 3).expect("zstd"),
            };
            let mut got = Vec::new();
            let n = inflate(codec, &compressed, data.len(), &mut |p| {
                got.extend_from_slice(p)
            })
            .unwrap_or_else(|e| panic!("codec {codec}: {e}"));
            assert_eq!(n, data.len(), "codec {codec}");
            assert!(got == data, "codec {codec}");
            assert_eq!(inflated_len(codec, &compressed, data.len()), Ok(data.len()));
        }
    }

    #[test]
    fn a_bomb_is_refused_as_it_inflates() {
        // Proves a payload of 64 MiB of zeros (a few KiB compressed) is refused with TooLarge
        // under a 1 MiB bound in every codec, and that the sink saw no more than the bound:
        // decompression stopped when the bound was passed, not after the whole output.
        for codec in [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD] {
            let payload = bomb(codec, 64 << 20);
            let max = 1 << 20;
            let mut seen = 0usize;
            let r = inflate(codec, &payload, max, &mut |p| seen += p.len());
            assert!(
                matches!(r, Err(RecordsError::TooLarge { max: m, .. }) if m == max),
                "codec {codec}: {r:?}"
            );
            assert!(seen <= max, "codec {codec}: sink saw {seen}");
        }
    }

    #[test]
    fn garbage_and_lying_snappy_lengths_are_decompress_errors() {
        // Proves bytes that are not the codec's format fail with Decompress (no panic), and a
        // raw snappy block claiming far more than its input can hold is refused before its
        // claimed length is allocated.
        for codec in [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD] {
            let r = inflated_len(codec, b"definitely not compressed", 1 << 20);
            assert!(
                matches!(r, Err(RecordsError::Decompress { .. })),
                "{codec}: {r:?}"
            );
        }
        // Varint 0xFFFFFF (16 MiB) followed by two bytes.
        let lying = [0xff, 0xff, 0xff, 0x07, 0x00, 0x01];
        let r = inflated_len(CODEC_SNAPPY, &lying, 1 << 30);
        assert!(matches!(r, Err(RecordsError::Decompress { .. })), "{r:?}");
    }
}
