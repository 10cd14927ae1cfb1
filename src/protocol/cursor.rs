//! A bounds-checked, big-endian cursor over untrusted bytes: the primitive reads the record
//! codecs of the internal topics (`__consumer_offsets` in `group::record`,
//! `__transaction_state` in `txn::record`) share. Every read checks the length first, so a
//! short or hostile record is an error, never a panic.
//!
//! The cursor is generic over the codec's error type `E`, which only has to say what a
//! truncated read is (`From<Truncated>`); each codec adds its own field readers (strings,
//! arrays, tagged fields) in an `impl Cursor<'_, ItsError>` beside its format.
use std::marker::PhantomData;

/// A read ran past the end of the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncated;

/// See the module docs.
pub struct Cursor<'a, E> {
    buf: &'a [u8],
    error: PhantomData<E>,
}

impl<'a, E: From<Truncated>> Cursor<'a, E> {
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor {
            buf,
            error: PhantomData,
        }
    }

    /// The bytes not read yet.
    pub fn remaining(&self) -> &'a [u8] {
        self.buf
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], E> {
        let (head, rest) = self.buf.split_at_checked(n).ok_or(Truncated)?;
        self.buf = rest;
        Ok(head)
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], E> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    pub fn i8(&mut self) -> Result<i8, E> {
        Ok(i8::from_be_bytes(self.array()?))
    }

    pub fn i16(&mut self) -> Result<i16, E> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    pub fn i32(&mut self) -> Result<i32, E> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    pub fn i64(&mut self) -> Result<i64, E> {
        Ok(i64::from_be_bytes(self.array()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_big_endian_and_refuses_to_run_past_the_end() {
        // Proves each read consumes exactly its width and a short read is Truncated.
        let bytes = [0x01, 0x00, 0x02, 0x00, 0x00, 0x00, 0x03, 0xff];
        let mut c: Cursor<'_, Truncated> = Cursor::new(&bytes);
        assert_eq!(c.i8(), Ok(1));
        assert_eq!(c.i16(), Ok(2));
        assert_eq!(c.i32(), Ok(3));
        assert_eq!(c.remaining(), &[0xff]);
        assert_eq!(c.i16(), Err(Truncated));
        assert_eq!(c.take(1), Ok(&[0xff][..]));
        assert_eq!(c.i8(), Err(Truncated));
    }
}
