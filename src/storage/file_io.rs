//! The direct-I/O layer for segment data, behind a small object-safe trait so tests can
//! inject faults (failed writes, failed fsyncs) without touching the log logic.
//!
//! The production implementation wraps glommio's `DmaFile` (O_DIRECT through io_uring).
//! Writes must start at an aligned position; the implementation pads the tail of the last
//! block with zeros, which is why the log keeps its partial last block in memory and
//! rewrites it with new data on the next flush. Reads copy the aligned DMA buffer into one
//! `Bytes` per read (glommio's buffers are `!Send`), and callers slice that without copying.

use std::io;
use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use futures::future::LocalBoxFuture;

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
    /// True when a completed `write_at` is already durable, data and the size needed to
    /// read it back (the file is open O_DSYNC): the flusher then needs no `fdatasync` for
    /// the bytes it wrote through this file.
    fn writes_durable(&self) -> bool {
        false
    }
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
    /// Opens the segment the flusher appends to under the Sync policy, where every write
    /// is followed by an fsync before the acknowledgement anyway. The real file system opens
    /// it O_DSYNC, so the write itself completes only once durable: one io_uring operation
    /// (and one hand-off to the kernel's worker) per pass instead of a write and an
    /// `fdatasync`. Wrappers that count or fail `fdatasync`s keep the default.
    fn open_segment_durable_writes<'a>(
        &'a self,
        path: &'a Path,
        create: bool,
    ) -> IoFuture<'a, Rc<dyn SegmentFile>> {
        self.open_segment(path, create)
    }
}

/// Opens the segment a log appends to: O_DSYNC (`open_segment_durable_writes`) when every
/// flush is synced anyway (the Sync flush policy), plain otherwise.
pub(crate) async fn open_active_segment(
    fs: &dyn FileSystem,
    path: &Path,
    create: bool,
    sync_policy: bool,
) -> io::Result<Rc<dyn SegmentFile>> {
    if sync_policy {
        fs.open_segment_durable_writes(path, create).await
    } else {
        fs.open_segment(path, create).await
    }
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
        Box::pin(open_dma(path, create, false))
    }
    fn open_segment_durable_writes<'a>(
        &'a self,
        path: &'a Path,
        create: bool,
    ) -> IoFuture<'a, Rc<dyn SegmentFile>> {
        Box::pin(open_dma(path, create, true))
    }
}

async fn open_dma(path: &Path, create: bool, dsync: bool) -> io::Result<Rc<dyn SegmentFile>> {
    if let Some(dir) = path.parent() {
        probe_device_once(dir).await?;
    }
    let file = glommio::io::OpenOptions::new()
        .create(create)
        .read(true)
        .write(true)
        .custom_flags(if dsync { libc::O_DSYNC } else { 0 })
        .dma_open(path)
        .await?;
    let file: Rc<dyn SegmentFile> = Rc::new(DmaSegmentFile { file, dsync });
    Ok(file)
}

struct DmaSegmentFile {
    file: glommio::io::DmaFile,
    /// Opened O_DSYNC.
    dsync: bool,
}

impl SegmentFile for DmaSegmentFile {
    fn alignment(&self) -> u64 {
        self.file.alignment()
    }
    fn write_at<'a>(&'a self, chunks: &'a [Bytes], pos: u64) -> IoFuture<'a, ()> {
        Box::pin(async move {
            let data_len: usize = chunks.iter().map(|c| c.len()).sum();
            let len = self.file.align_up(data_len as u64) as usize;
            let mut buf = self.file.alloc_dma_buffer(len);
            let mut rest = buf.as_bytes_mut();
            // The DMA buffer is exactly `len >= data_len` bytes.
            for c in chunks {
                let (head, tail) = rest.split_at_mut(c.len());
                head.copy_from_slice(c);
                rest = tail;
            }
            rest.fill(0);
            super::copy_stats::add_dma(data_len);
            let written = self.file.write_at(buf, pos).await?;
            if written < len {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "short direct-I/O write",
                ));
            }
            Ok(())
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
    fn writes_durable(&self) -> bool {
        self.dsync
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
