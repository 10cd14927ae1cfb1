//! The direct-I/O layer for segment data, behind a small object-safe trait so tests can
//! inject faults (failed writes, failed fsyncs) without touching the log logic.
//!
//! The production implementation wraps glommio's `DmaFile` (O_DIRECT). Writes must start
//! at an aligned position; the implementation pads the tail of the last block with zeros,
//! which is why the log keeps its partial last block in memory and rewrites it with new
//! data on the next flush. Reads copy the aligned DMA buffer into one `Bytes` per read
//! (glommio's buffers are `!Send`), and callers slice that without copying.
//!
//! Writes go straight from the caller's memory: the log's batches sit in aligned,
//! file-congruent chunks (`aligned.rs`), so `plan_write` hands every whole aligned block to
//! the kernel where it lies and copies only the blocks that straddle two buffers and the
//! partial last block (each under one alignment unit). glommio's io_uring writes only from
//! its own `DmaBuffer`, which is `!Send` and cannot back the `Bytes` that cross shards, so
//! the write itself is a `pwritev` on glommio's blocking-thread pool (an O_DIRECT append
//! past the file size would be handed to a kernel worker by io_uring as well).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use futures::future::LocalBoxFuture;

use super::aligned::AlignedBuf;

pub type IoFuture<'a, T> = LocalBoxFuture<'a, io::Result<T>>;

/// One open segment data file.
pub trait SegmentFile {
    /// Direct-I/O alignment (typically 4096 or 512).
    fn alignment(&self) -> u64;
    /// Writes the concatenation of `chunks` at `pos` (aligned), zero-padding to the
    /// alignment. Taking the staged batches as they are (shared `Bytes`) lets the one copy
    /// of the produce path be the copy into the aligned DMA buffer.
    fn write_at<'a>(&'a self, chunks: &'a [Bytes], pos: u64) -> IoFuture<'a, ()>;
    /// Reads up to `len` bytes at `pos` (any alignment); short at end of file.
    fn read_at(&self, pos: u64, len: usize) -> IoFuture<'_, Bytes>;
    fn sync_data(&self) -> IoFuture<'_, ()>;
    fn truncate(&self, len: u64) -> IoFuture<'_, ()>;
    /// Reserves `len` bytes of extent without changing the file size.
    fn pre_allocate(&self, len: u64) -> IoFuture<'_, ()>;
    fn size(&self) -> IoFuture<'_, u64>;
}

/// Opens segment files. Tests wrap the real one to inject faults.
pub trait FileSystem {
    fn open_segment<'a>(
        &'a self,
        path: &'a Path,
        create: bool,
    ) -> IoFuture<'a, Rc<dyn SegmentFile>>;
}

/// glommio `DmaFile`: O_DIRECT, io_uring.
pub struct DmaFileSystem;

thread_local! {
    /// Devices (st_dev) whose io_uring poll support this thread has probed correctly.
    static PROBED_DEVICES: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// glommio decides once per thread and device whether reads may use the io_uring poll ring,
/// by probing a read at offset 0 of the first `DmaFile` opened there. If that file is empty
/// the kernel answers "success" without touching the device, glommio caches "pollable", and
/// every later read on a device without poll queues fails with EOPNOTSUPP. So before the
/// first real open on a device we open a one-block file, which makes the probe truthful.
async fn probe_device_once(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir)?.dev();
    if PROBED_DEVICES.with(|p| p.borrow().contains(&dev)) {
        return Ok(());
    }
    let probe = dir.join(format!(".iopoll-probe-{}.tmp", std::process::id()));
    std::fs::write(&probe, [0u8; 4096])?;
    let opened = glommio::io::DmaFile::open(&probe).await;
    let _ = std::fs::remove_file(&probe);
    opened?.close().await?;
    PROBED_DEVICES.with(|p| p.borrow_mut().push(dev));
    Ok(())
}

impl FileSystem for DmaFileSystem {
    fn open_segment<'a>(
        &'a self,
        path: &'a Path,
        create: bool,
    ) -> IoFuture<'a, Rc<dyn SegmentFile>> {
        Box::pin(async move {
            if let Some(dir) = path.parent() {
                probe_device_once(dir).await?;
            }
            let file = if create {
                glommio::io::OpenOptions::new()
                    .create(true)
                    .read(true)
                    .write(true)
                    .dma_open(path)
                    .await?
            } else {
                glommio::io::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .dma_open(path)
                    .await?
            };
            let file: Rc<dyn SegmentFile> = Rc::new(DmaSegmentFile { file });
            Ok(file)
        })
    }
}

struct DmaSegmentFile {
    file: glommio::io::DmaFile,
}

impl SegmentFile for DmaSegmentFile {
    fn alignment(&self) -> u64 {
        self.file.alignment()
    }
    fn write_at<'a>(&'a self, chunks: &'a [Bytes], pos: u64) -> IoFuture<'a, ()> {
        Box::pin(async move {
            let align = self.file.alignment().max(1) as usize;
            let job = WriteJob {
                // A descriptor of the write's own: if this future is dropped mid-write, the
                // helper thread still writes to this file, never to a number reused since.
                fd: dup_fd(self.file.as_raw_fd())?,
                pos,
                plan: plan_write(chunks, align),
                _keep: chunks.to_vec(),
            };
            glommio::executor().spawn_blocking(move || job.run()).await
        })
    }
    fn read_at(&self, pos: u64, len: usize) -> IoFuture<'_, Bytes> {
        Box::pin(async move {
            let result = self.file.read_at(pos, len).await?;
            Ok(Bytes::copy_from_slice(&result))
        })
    }
    fn sync_data(&self) -> IoFuture<'_, ()> {
        Box::pin(async move { Ok(self.file.fdatasync().await?) })
    }
    fn truncate(&self, len: u64) -> IoFuture<'_, ()> {
        Box::pin(async move { Ok(self.file.truncate(len).await?) })
    }
    fn pre_allocate(&self, len: u64) -> IoFuture<'_, ()> {
        Box::pin(async move { Ok(self.file.pre_allocate(len, true).await?) })
    }
    fn size(&self) -> IoFuture<'_, u64> {
        Box::pin(async move { Ok(self.file.file_size().await?) })
    }
}

/// One piece of a write, in file order.
#[derive(Debug)]
enum WritePart {
    /// Whole aligned blocks at an aligned address inside the caller's buffers (kept alive
    /// by the job's `_keep`).
    Direct { addr: usize, len: usize },
    /// A block of `len` (the alignment) bytes assembled by copying (it straddled two
    /// buffers, or ends the write). The buffer may be larger.
    Assembled { buf: AlignedBuf, len: usize },
}

/// Splits the concatenation of `chunks` (to be written at an aligned position) into parts
/// the kernel can take under O_DIRECT: runs of whole aligned blocks where they lie, and
/// copied blocks for the rest, the last one zero-padded. Memory-contiguous chunks (batches
/// appended back to back in one log chunk) form one run.
fn plan_write(chunks: &[Bytes], align: usize) -> Vec<WritePart> {
    let align = align.max(1);
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for c in chunks.iter().filter(|c| !c.is_empty()) {
        let addr = c.as_ptr() as usize;
        match runs.last_mut() {
            Some((start, len)) if *start + *len == addr => *len += c.len(),
            _ => runs.push((addr, c.len())),
        }
    }
    let mut parts = Vec::new();
    // The block being assembled and how much of it is filled.
    let mut block: Option<(AlignedBuf, usize)> = None;
    let mut assembled = 0usize;
    for (mut addr, mut len) in runs {
        while len > 0 {
            if block.is_none() && addr % align == 0 && len >= align {
                let whole = len - len % align;
                match parts.last_mut() {
                    Some(WritePart::Direct { addr: a, len: l }) if *a + *l == addr => *l += whole,
                    _ => parts.push(WritePart::Direct { addr, len: whole }),
                }
                addr += whole;
                len -= whole;
                continue;
            }
            let (buf, filled) = block.get_or_insert_with(|| (AlignedBuf::zeroed(align), 0));
            let take = (align - *filled).min(len);
            // SAFETY: `[addr, addr + take)` lies inside one of `chunks` (a run is a sequence
            // of them, contiguous in memory), which the caller keeps alive and unchanged.
            let src = unsafe { std::slice::from_raw_parts(addr as *const u8, take) };
            buf.write(*filled, src);
            *filled += take;
            assembled += take;
            addr += take;
            len -= take;
            if *filled == align {
                if let Some((buf, _)) = block.take() {
                    parts.push(WritePart::Assembled { buf, len: align });
                }
            }
        }
    }
    if let Some((buf, _)) = block {
        parts.push(WritePart::Assembled { buf, len: align });
    }
    super::copy_stats::add_assembled(assembled);
    parts
}

/// A planned write, run on a blocking thread.
struct WriteJob {
    fd: OwnedFd,
    pos: u64,
    plan: Vec<WritePart>,
    /// The caller's buffers the `Direct` parts point into.
    _keep: Vec<Bytes>,
}

// SAFETY: the raw addresses in `plan` point into `_keep`'s buffers (`Bytes`: `Send`, shared
// and never written while shared), which move with the job and live until it is dropped.
unsafe impl Send for WriteJob {}

/// iovecs per `pwritev` call (Linux's IOV_MAX).
const IOVECS_PER_CALL_MAX: usize = 1024;

impl WriteJob {
    fn run(self) -> io::Result<()> {
        let iovecs: Vec<libc::iovec> = self
            .plan
            .iter()
            .map(|p| match p {
                WritePart::Direct { addr, len } => libc::iovec {
                    iov_base: *addr as *mut libc::c_void,
                    iov_len: *len,
                },
                WritePart::Assembled { buf, len } => libc::iovec {
                    iov_base: buf.as_ptr() as *mut libc::c_void,
                    iov_len: (*len).min(buf.capacity()),
                },
            })
            .collect();
        let mut pos = self.pos;
        for group in iovecs.chunks(IOVECS_PER_CALL_MAX) {
            let want: usize = group.iter().map(|v| v.iov_len).sum();
            loop {
                // SAFETY: every iovec points into memory this job keeps alive (see `Send`).
                let n = unsafe {
                    libc::pwritev(
                        self.fd.as_raw_fd(),
                        group.as_ptr(),
                        group.len() as libc::c_int,
                        pos as libc::off_t,
                    )
                };
                if n < 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    return Err(e);
                }
                if n as usize != want {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "short direct-I/O write",
                    ));
                }
                break;
            }
            pos += want as u64;
        }
        Ok(())
    }
}

fn dup_fd(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: `fd` is the open descriptor of a `DmaFile` the caller holds for this call.
    unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flatten(plan: &[WritePart]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in plan {
            match p {
                WritePart::Direct { addr, len } => {
                    // SAFETY: the test keeps the planned chunks alive while reading.
                    out.extend_from_slice(unsafe {
                        std::slice::from_raw_parts(*addr as *const u8, *len)
                    })
                }
                WritePart::Assembled { buf, len } => {
                    out.extend_from_slice(buf.as_slice().get(..*len).unwrap_or_default())
                }
            }
        }
        out
    }

    /// Aligned runs (several contiguous chunks of one buffer) are written where they lie;
    /// only the block straddling two buffers and the partial last block are copied; the
    /// planned bytes are the input, zero-padded to the alignment.
    #[test]
    fn plan_copies_only_straddling_and_partial_blocks() {
        let mut a = AlignedBuf::zeroed(3 * 512);
        let mut b = AlignedBuf::zeroed(2 * 512);
        a.write(0, &[1u8; 3 * 512]);
        b.write(0, &[2u8; 2 * 512]);
        let a = bytes::Bytes::from_owner(VecOwner(a));
        let b = bytes::Bytes::from_owner(VecOwner(b));
        // A run of two contiguous slices of `a` (1100 + 300 bytes), then `b` from an
        // unaligned start, then a 100-byte tail.
        let chunks = vec![a.slice(0..1100), a.slice(1100..1400), b.slice(10..1024)];
        let before = crate::storage::copy_stats::get().assembled;
        let plan = plan_write(&chunks, 512);
        let copied = crate::storage::copy_stats::get().assembled - before;
        let direct: usize = plan
            .iter()
            .map(|p| match p {
                WritePart::Direct { len, .. } => *len,
                WritePart::Assembled { .. } => 0,
            })
            .sum();
        let total = 1400 + 1014;
        assert_eq!(direct, 1024, "two whole blocks of `a` are written in place");
        assert_eq!(copied as usize, total - direct);
        let mut want: Vec<u8> = chunks.iter().flat_map(|c| c.to_vec()).collect();
        want.resize(total.next_multiple_of(512), 0);
        assert_eq!(flatten(&plan), want);
        drop(chunks);
    }

    struct VecOwner(AlignedBuf);
    impl AsRef<[u8]> for VecOwner {
        fn as_ref(&self) -> &[u8] {
            self.0.as_slice()
        }
    }
}
