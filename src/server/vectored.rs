//! Vectored socket writes: a response made of many buffers (a Fetch response is small
//! encoded pieces interleaved with record batches straight from the log) goes to the kernel
//! in one `sendmsg` with an iovec per buffer, so no payload is copied into a staging buffer
//! and a response costs one system call, not one per batch.
//!
//! The send is non-blocking (`MSG_DONTWAIT`), exactly as glommio's own write path first
//! tries; when the socket buffer is full it falls back to the glommio stream's write for the
//! current buffer, which parks the task until the socket is writable. Ordering is safe
//! because glommio keeps no write buffer of its own: every byte it accepted has already gone
//! to the kernel.
use std::io;
use std::os::fd::RawFd;

use bytes::Bytes;
use futures::{AsyncWrite, AsyncWriteExt};

/// iovecs handed to one `sendmsg` (Linux's IOV_MAX is 1024).
const IOVECS_PER_SEND_MAX: usize = 1024;

/// Writes every byte of `chunks`, in order.
pub async fn write_all_vectored<W: AsyncWrite + Unpin>(
    writer: &mut W,
    fd: RawFd,
    chunks: &[Bytes],
) -> io::Result<()> {
    let mut index = 0;
    let mut offset = 0;
    while index < chunks.len() {
        let Some(current) = chunks.get(index) else {
            break;
        };
        if offset >= current.len() {
            index += 1;
            offset = 0;
            continue;
        }
        let sent = match send_dontwait(fd, chunks, index, offset) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // Let glommio wait for writability; it writes at least part of this buffer.
                let rest = current.slice(offset..);
                let n = writer.write(&rest).await?;
                if n == 0 {
                    return Err(io::ErrorKind::WriteZero.into());
                }
                n
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
            Err(e) => return Err(e),
        };
        (index, offset) = advance(chunks, index, offset, sent);
    }
    Ok(())
}

/// Writes every byte of `chunks`, in order, through `writer`'s own vectored writes: for a
/// stream that transforms what it writes (TLS), where the socket cannot be written directly.
/// The writer may keep bytes buffered: flush it after.
pub async fn write_all_through<W: AsyncWrite + Unpin>(
    writer: &mut W,
    chunks: &[Bytes],
) -> io::Result<()> {
    let mut index = 0;
    let mut offset = 0;
    while index < chunks.len() {
        let slices: Vec<io::IoSlice<'_>> = pending_parts(chunks, index, offset)
            .map(io::IoSlice::new)
            .collect();
        if slices.is_empty() {
            break;
        }
        let n = writer.write_vectored(&slices).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        (index, offset) = advance(chunks, index, offset, n);
        // Skip empty chunks so the loop ends when only they remain.
        while chunks.get(index).is_some_and(|c| c.len() <= offset) {
            index += 1;
            offset = 0;
        }
    }
    Ok(())
}

/// What one vectored write is given: the unsent parts of `chunks` from (`index`, `offset`)
/// on, over at most `IOVECS_PER_SEND_MAX` chunks, empty parts left out (an empty iovec
/// would make a write of 0 bytes look like a closed peer).
fn pending_parts(chunks: &[Bytes], index: usize, offset: usize) -> impl Iterator<Item = &[u8]> {
    chunks
        .iter()
        .enumerate()
        .skip(index)
        .take(IOVECS_PER_SEND_MAX)
        .filter_map(move |(i, c)| c.get(if i == index { offset } else { 0 }..))
        .filter(|part| !part.is_empty())
}

/// The position (`index`, `offset`) in `chunks` after `written` more bytes went out from
/// (`index`, `offset`); never past the end.
fn advance(
    chunks: &[Bytes],
    mut index: usize,
    mut offset: usize,
    written: usize,
) -> (usize, usize) {
    let mut left = written;
    while left > 0 {
        let Some(c) = chunks.get(index) else { break };
        let here = c.len() - offset;
        if left >= here {
            left -= here;
            index += 1;
            offset = 0;
        } else {
            offset += left;
            left = 0;
        }
    }
    (index, offset)
}

/// One non-blocking `sendmsg` of the buffers from (`index`, `offset`) on.
fn send_dontwait(fd: RawFd, chunks: &[Bytes], index: usize, offset: usize) -> io::Result<usize> {
    let mut iovecs: Vec<libc::iovec> = pending_parts(chunks, index, offset)
        .map(|part| libc::iovec {
            iov_base: part.as_ptr() as *mut libc::c_void,
            iov_len: part.len(),
        })
        .collect();
    if iovecs.is_empty() {
        return Ok(0);
    }
    // SAFETY: msghdr is zero-initialised (no address, no control data); the iovecs point
    // into `chunks`, which outlive the call; the kernel only reads them.
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = iovecs.as_mut_ptr();
        msg.msg_iovlen = iovecs.len() as _;
        libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Advancing walks over whole chunks, empty ones included, stops inside a partly written
    /// one, and never runs past the end.
    #[test]
    fn advance_walks_whole_partial_and_empty_chunks() {
        let chunks = [
            Bytes::from_static(b"abc"),
            Bytes::new(),
            Bytes::from_static(b"de"),
        ];
        assert_eq!(advance(&chunks, 0, 0, 0), (0, 0));
        assert_eq!(advance(&chunks, 0, 0, 2), (0, 2));
        assert_eq!(advance(&chunks, 0, 0, 3), (1, 0));
        assert_eq!(advance(&chunks, 0, 2, 2), (2, 1));
        assert_eq!(advance(&chunks, 0, 0, 5), (3, 0));
        assert_eq!(advance(&chunks, 2, 1, 9), (3, 0));
    }

    /// The parts handed to a write start inside the current chunk, skip empty chunks and
    /// ones already sent, and stop after `IOVECS_PER_SEND_MAX` chunks.
    #[test]
    fn pending_parts_start_mid_chunk_and_skip_empty_ones() {
        let chunks = [
            Bytes::from_static(b"abc"),
            Bytes::new(),
            Bytes::from_static(b"de"),
        ];
        let parts = |i, o| pending_parts(&chunks, i, o).collect::<Vec<_>>();
        assert_eq!(parts(0, 0), [&b"abc"[..], b"de"]);
        assert_eq!(parts(0, 1), [&b"bc"[..], b"de"]);
        assert_eq!(parts(0, 3), [&b"de"[..]]);
        assert_eq!(parts(2, 1), [&b"e"[..]]);
        assert!(parts(2, 2).is_empty() && parts(3, 0).is_empty());
        let many = vec![Bytes::from_static(b"x"); IOVECS_PER_SEND_MAX + 5];
        assert_eq!(pending_parts(&many, 0, 0).count(), IOVECS_PER_SEND_MAX);
    }
}
