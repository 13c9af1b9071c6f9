//! Walks a Thrift binary-protocol struct without building it: the server's guard in front of the
//! Cython decoder, which trusts lengths (a 12-byte frame announcing 2**31 elements of an unknown
//! type keeps it skipping for seconds; a huge string length makes it allocate that much).
//!
//! After [`struct_end`] returns `Ok`, decoding the same bytes is O(len): every length and count
//! it met fits in the buffer, every wire type is a real Thrift type, and structs and containers
//! nest at most [`MAX_NESTING`] deep. It judges only the wire: strings are bytes here (whether one
//! must be UTF-8 depends on the IDL, and the decoder checks that as it decodes), and required
//! fields are checked on the decoded struct.
//!
//! Quirks kept from the Python walker this replaces, because they are the wire contract:
//! - an empty container is accepted whatever its element types (some writers put junk there) and
//!   whatever its depth;
//! - a field header's id bytes, and a fixed-width value, may run past the end: the next read of
//!   the enclosing struct reports it (`struct truncated`);
//! - in a container the bound is checked after each whole element (key and value);
//! - bytes after the outer STOP are not looked at.

use crate::error::WalkError;

/// Deepest nesting of structs and containers accepted; thriftpy2's reader allows 64.
pub const MAX_NESTING: usize = 32;

/// How a value of one wire type is laid out.
#[derive(Clone, Copy)]
enum Layout {
    /// A fixed number of bytes (bool, byte, i16, i32, i64, double).
    Fixed(usize),
    /// An i32 length, then that many bytes (string and binary share the wire type).
    String,
    /// A struct, map, set or list.
    Nested,
    /// Not a Thrift wire type.
    Invalid,
}

const fn layout(ttype: u8) -> Layout {
    match ttype {
        2 | 3 => Layout::Fixed(1),  // BOOL, BYTE
        6 => Layout::Fixed(2),      // I16
        8 => Layout::Fixed(4),      // I32
        4 | 10 => Layout::Fixed(8), // DOUBLE, I64
        11 => Layout::String,
        12..=15 => Layout::Nested, // STRUCT, MAP, SET, LIST
        _ => Layout::Invalid,
    }
}

const STRUCT: u8 = 12;
const MAP: u8 = 13;

/// The element types of a container: one for a list or set, key and value for a map.
#[derive(Clone, Copy)]
enum Elements {
    One(u8),
    Pair(u8, u8),
}

/// Walks the struct that starts at `offset` in `buf`; returns the offset just past its STOP.
///
/// An `offset` at or past the end is a truncated struct.
pub fn struct_end(buf: &[u8], offset: usize) -> Result<usize, WalkError> {
    walk_struct(buf, offset, 0, &mut 0)
}

/// [`struct_end`], and how many objects a decoder makes of the struct: the struct itself, and
/// every struct, string and container in it, and each element of a container of fixed-width
/// values (work the decoder does, though it makes no object of a skipped one); fixed-width
/// fields are not counted.
///
/// The walk bounds a decode's time by the bytes; this bounds its memory, where an element can
/// take one byte on the wire (an empty struct, its STOP) and a hundred or more as an object.
pub fn struct_objects(buf: &[u8], offset: usize) -> Result<(usize, usize), WalkError> {
    let mut objects = 1;
    let end = walk_struct(buf, offset, 0, &mut objects)?;
    Ok((end, objects))
}

/// The offset just past the value of wire type `ttype` at `pos`, for a decoder skipping a field it
/// does not read, in a struct that [`struct_end`] already accepted.
///
/// Checked all the same: a value that runs past the end is a truncated struct.
pub fn value_end(buf: &[u8], pos: usize, ttype: u8) -> Result<usize, WalkError> {
    let end = skip(buf, pos, ttype, 0, &mut 0)?;
    if end > buf.len() {
        return Err(WalkError::StructTruncated);
    }
    Ok(end)
}

fn walk_struct(
    buf: &[u8],
    mut pos: usize,
    depth: usize,
    objects: &mut usize,
) -> Result<usize, WalkError> {
    if depth > MAX_NESTING {
        return Err(WalkError::StructsTooDeep);
    }
    loop {
        let Some(&ftype) = buf.get(pos) else {
            return Err(WalkError::StructTruncated);
        };
        if ftype == 0 {
            return Ok(pos + 1); // STOP
        }
        pos += 3; // the type byte and the i16 field id
        pos = match layout(ftype) {
            Layout::Fixed(width) => pos + width,
            Layout::String => {
                *objects += 1;
                string_end(buf, pos)?
            }
            Layout::Nested | Layout::Invalid => skip(buf, pos, ftype, depth, objects)?,
        };
    }
}

/// The end of the string at `pos`; it may lie past the end of `buf` (the caller checks).
fn string_end(buf: &[u8], pos: usize) -> Result<usize, WalkError> {
    let n = i32::from_be_bytes(header(buf, pos).ok_or(WalkError::StringTruncated)?);
    let n = usize::try_from(n).map_err(|_| WalkError::NegativeStringLength)?;
    Ok(pos.saturating_add(4).saturating_add(n))
}

/// Skips one value of wire type `ttype`, counting the objects it makes into `objects`; the result
/// may lie past the end (the caller checks).
fn skip(
    buf: &[u8],
    pos: usize,
    ttype: u8,
    depth: usize,
    objects: &mut usize,
) -> Result<usize, WalkError> {
    match layout(ttype) {
        Layout::Fixed(width) => Ok(pos.saturating_add(width)),
        Layout::String => {
            *objects += 1;
            string_end(buf, pos)
        }
        Layout::Invalid => Err(WalkError::UnknownWireType(ttype)),
        Layout::Nested if ttype == STRUCT => {
            *objects += 1;
            walk_struct(buf, pos, depth + 1, objects)
        }
        Layout::Nested if ttype == MAP => {
            let [ktype, vtype, n0, n1, n2, n3] =
                header(buf, pos).ok_or(WalkError::MapHeaderTruncated)?;
            let n = i32::from_be_bytes([n0, n1, n2, n3]);
            *objects += 1;
            skip_elements(
                buf,
                pos + 6,
                n,
                Elements::Pair(ktype, vtype),
                depth + 1,
                objects,
            )
        }
        Layout::Nested => {
            // LIST or SET
            let [etype, n0, n1, n2, n3] = header(buf, pos).ok_or(WalkError::ListHeaderTruncated)?;
            let n = i32::from_be_bytes([n0, n1, n2, n3]);
            *objects += 1;
            skip_elements(buf, pos + 5, n, Elements::One(etype), depth + 1, objects)
        }
    }
}

/// The `N` bytes at `pos`, if they are all there.
fn header<const N: usize>(buf: &[u8], pos: usize) -> Option<[u8; N]> {
    buf.get(pos..pos.checked_add(N)?)?.try_into().ok()
}

/// Skips `n` container elements starting at `pos` (just past a header that fits in `buf`).
fn skip_elements(
    buf: &[u8],
    mut pos: usize,
    n: i32,
    elements: Elements,
    depth: usize,
    objects: &mut usize,
) -> Result<usize, WalkError> {
    let n = usize::try_from(n).map_err(|_| WalkError::NegativeContainerSize)?;
    if n == 0 {
        return Ok(pos);
    }
    if depth > MAX_NESTING {
        return Err(WalkError::ContainersTooDeep);
    }
    let end = buf.len();
    let widths = match elements {
        Elements::One(t) => match layout(t) {
            Layout::Invalid => return Err(WalkError::UnknownElementType(t)),
            Layout::Fixed(w) => Some(w),
            _ => None,
        },
        Elements::Pair(k, v) => match (layout(k), layout(v)) {
            (Layout::Invalid, _) | (_, Layout::Invalid) => {
                return Err(WalkError::UnknownMapElementType(k, v))
            }
            (Layout::Fixed(kw), Layout::Fixed(vw)) => Some(kw + vw),
            _ => None,
        },
    };
    // Every element of a real type takes at least one byte: this bounds the loop below.
    if n > end.saturating_sub(pos) {
        return Err(WalkError::ContainerTruncated);
    }
    if let Some(width) = widths {
        // No request of the IDL has a container of fixed-width values: these are a peer's
        // padding, which the decoder skips one by one holding the GIL (16.7 million bools in a
        // 16 MiB frame: 170 ms of every other client's time). Each counts as an object.
        *objects = objects.saturating_add(n);
        return Ok(pos.saturating_add(n.saturating_mul(width)));
    }
    for _ in 0..n {
        match elements {
            Elements::One(t) => pos = skip(buf, pos, t, depth, objects)?,
            Elements::Pair(k, v) => {
                pos = skip(buf, pos, k, depth, objects)?;
                pos = skip(buf, pos, v, depth, objects)?;
            }
        }
        if pos > end {
            return Err(WalkError::ContainerTruncated);
        }
    }
    Ok(pos)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOL: u8 = 2;
    const BYTE: u8 = 3;
    const DOUBLE: u8 = 4;
    const I16: u8 = 6;
    const I32: u8 = 8;
    const I64: u8 = 10;
    const STRING: u8 = 11;
    const SET: u8 = 14;
    const LIST: u8 = 15;

    /// Writes binary-protocol pieces; `stop` closes a struct.
    #[derive(Default, Clone)]
    struct Wire(Vec<u8>);

    impl Wire {
        fn field(mut self, ttype: u8, id: i16) -> Self {
            self.0.push(ttype);
            self.0.extend_from_slice(&id.to_be_bytes());
            self
        }
        fn bytes(mut self, bytes: &[u8]) -> Self {
            self.0.extend_from_slice(bytes);
            self
        }
        fn i32(self, v: i32) -> Self {
            self.bytes(&v.to_be_bytes())
        }
        fn string(self, s: &[u8]) -> Self {
            self.i32(i32::try_from(s.len()).unwrap()).bytes(s)
        }
        fn list(self, etype: u8, n: i32) -> Self {
            self.bytes(&[etype]).i32(n)
        }
        fn map(self, ktype: u8, vtype: u8, n: i32) -> Self {
            self.bytes(&[ktype, vtype]).i32(n)
        }
        fn stop(self) -> Self {
            self.bytes(&[0])
        }
        fn end(&self) -> Result<usize, WalkError> {
            struct_end(&self.0, 0)
        }
    }

    fn wire() -> Wire {
        Wire::default()
    }

    /// A struct holding one field of each scalar type and a string.
    fn flat() -> Wire {
        wire()
            .field(BOOL, 1)
            .bytes(&[1])
            .field(BYTE, 2)
            .bytes(&[0x80])
            .field(I16, 3)
            .bytes(&[0, 7])
            .field(I32, 4)
            .i32(-5)
            .field(I64, 5)
            .bytes(&[0; 8])
            .field(DOUBLE, 6)
            .bytes(&1.5_f64.to_be_bytes())
            .field(STRING, 7)
            .string(b"hello")
            .stop()
    }

    #[test]
    fn objects_are_counted_and_fixed_width_elements_but_not_fields() {
        let one = wire().stop();
        assert_eq!(struct_objects(&one.0, 0), Ok((1, 1)));
        // A list of 3 empty structs and a string in a struct: 1 + 1 + 3 + 1.
        let w = wire()
            .field(LIST, 1)
            .list(STRUCT, 3)
            .stop()
            .stop()
            .stop()
            .field(STRING, 2)
            .string(b"ab")
            .field(I64, 3)
            .bytes(&7i64.to_be_bytes())
            .stop();
        assert_eq!(struct_objects(&w.0, 0), Ok((w.0.len(), 6)));
        // Fixed-width elements count one each (the decoder's work skipping them); a map's keys
        // and values count too: 1 + (1 + 2) + (1 + 2).
        let w = wire()
            .field(LIST, 1)
            .list(I64, 2)
            .bytes(&1i64.to_be_bytes())
            .bytes(&2i64.to_be_bytes())
            .field(MAP, 2)
            .map(STRING, STRING, 1)
            .string(b"k")
            .string(b"v")
            .stop();
        assert_eq!(struct_objects(&w.0, 0), Ok((w.0.len(), 7)));
        // A fixed-width field counts nothing; a map of fixed-width pairs one a pair.
        let w = wire()
            .field(I64, 1)
            .bytes(&1i64.to_be_bytes())
            .field(MAP, 2)
            .map(I32, BOOL, 2)
            .bytes(&[0, 0, 0, 1, 1, 0, 0, 0, 2, 0])
            .stop();
        assert_eq!(struct_objects(&w.0, 0), Ok((w.0.len(), 4)));
    }

    #[test]
    fn empty_struct_ends_after_its_stop() {
        assert_eq!(wire().stop().end(), Ok(1));
    }

    #[test]
    fn every_scalar_type_is_walked() {
        let w = flat();
        assert_eq!(w.end(), Ok(w.0.len()));
    }

    #[test]
    fn offset_and_trailing_bytes() {
        let w = wire().bytes(b"header").stop().bytes(b"junk after the stop");
        assert_eq!(struct_end(&w.0, 6), Ok(7));
    }

    #[test]
    fn truncated_structs() {
        assert_eq!(wire().end(), Err(WalkError::StructTruncated));
        assert_eq!(struct_end(&[0], 1), Err(WalkError::StructTruncated));
        assert_eq!(
            struct_end(&[0], usize::MAX),
            Err(WalkError::StructTruncated)
        );
        // No STOP after a complete field.
        assert_eq!(
            wire().field(I32, 1).i32(1).end(),
            Err(WalkError::StructTruncated)
        );
        // A field header cut inside its id, and a fixed-width value cut short.
        assert_eq!(
            wire().bytes(&[I32, 0]).end(),
            Err(WalkError::StructTruncated)
        );
        assert_eq!(
            wire().field(I64, 1).bytes(&[0; 7]).end(),
            Err(WalkError::StructTruncated)
        );
        // Every proper prefix of a valid struct is truncated somewhere.
        let full = flat();
        for cut in 0..full.0.len() {
            assert!(
                struct_end(&full.0[..cut], 0).is_err(),
                "prefix of {cut} bytes"
            );
        }
    }

    #[test]
    fn string_lengths() {
        assert_eq!(
            wire().field(STRING, 1).bytes(&[0, 0]).end(),
            Err(WalkError::StringTruncated)
        );
        assert_eq!(
            wire().field(STRING, 1).i32(-1).stop().end(),
            Err(WalkError::NegativeStringLength)
        );
        assert_eq!(
            wire().field(STRING, 1).i32(i32::MIN).stop().end(),
            Err(WalkError::NegativeStringLength)
        );
        // A huge length runs past the end: the enclosing struct is truncated.
        assert_eq!(
            wire().field(STRING, 1).i32(i32::MAX).stop().end(),
            Err(WalkError::StructTruncated)
        );
        assert_eq!(
            wire().field(STRING, 1).i32(2).bytes(b"a").end(),
            Err(WalkError::StructTruncated)
        );
    }

    #[test]
    fn strings_are_bytes_to_the_walk() {
        // Whether a string field must be UTF-8 is the IDL's business; the decoder checks it.
        let w = wire().field(STRING, 1).string(b"\xff\xfe\x80").stop();
        assert_eq!(w.end(), Ok(w.0.len()));
    }

    #[test]
    fn unknown_wire_types() {
        for bad in [1_u8, 5, 7, 9, 16, 17, 18, 99, 255] {
            assert_eq!(
                wire().field(bad, 1).bytes(&[0; 8]).stop().end(),
                Err(WalkError::UnknownWireType(bad)),
                "type {bad}"
            );
        }
        assert_eq!(
            WalkError::UnknownWireType(99).to_string(),
            "unknown wire type 99"
        );
    }

    #[test]
    fn container_headers_truncated() {
        for ttype in [LIST, SET] {
            assert_eq!(
                wire().field(ttype, 1).bytes(&[I32, 0, 0, 0]).end(),
                Err(WalkError::ListHeaderTruncated)
            );
        }
        assert_eq!(
            wire().field(MAP, 1).bytes(&[STRING, I32, 0, 0, 0]).end(),
            Err(WalkError::MapHeaderTruncated)
        );
        // Field id cut short before a nested value.
        assert_eq!(
            wire().bytes(&[LIST, 0]).end(),
            Err(WalkError::ListHeaderTruncated)
        );
        assert_eq!(
            wire().bytes(&[STRUCT]).end(),
            Err(WalkError::StructTruncated)
        );
    }

    #[test]
    fn container_sizes() {
        assert_eq!(
            wire().field(LIST, 1).list(I32, -1).stop().end(),
            Err(WalkError::NegativeContainerSize)
        );
        assert_eq!(
            wire().field(MAP, 1).map(I32, I32, i32::MIN).stop().end(),
            Err(WalkError::NegativeContainerSize)
        );
        // More elements announced than bytes left.
        assert_eq!(
            wire().field(LIST, 1).list(BYTE, 3).bytes(&[1, 2]).end(),
            Err(WalkError::ContainerTruncated)
        );
        assert_eq!(
            wire().field(LIST, 1).list(I64, i32::MAX).stop().end(),
            Err(WalkError::ContainerTruncated)
        );
        // Fixed-width elements that fit the count check but not the bytes: the struct is cut.
        assert_eq!(
            wire().field(LIST, 1).list(I32, 2).i32(1).stop().end(),
            Err(WalkError::StructTruncated)
        );
        // Variable-width elements running past the end.
        assert_eq!(
            wire()
                .field(LIST, 1)
                .list(STRING, 2)
                .string(b"ab")
                .i32(50)
                .bytes(b"x")
                .end(),
            Err(WalkError::ContainerTruncated)
        );
        assert_eq!(
            wire()
                .field(MAP, 1)
                .map(STRING, STRING, 1)
                .i32(2)
                .bytes(b"k")
                .end(),
            Err(WalkError::StringTruncated)
        );
    }

    #[test]
    fn unknown_element_types() {
        // The test server's "bad_args" frame: 2**31 - 1 elements of type 99.
        let w = wire().field(LIST, 2).list(99, i32::MAX).stop();
        assert_eq!(w.end(), Err(WalkError::UnknownElementType(99)));
        assert_eq!(
            WalkError::UnknownElementType(99).to_string(),
            "unknown element type in (99,)"
        );
        let w = wire().field(MAP, 1).map(STRING, 0, 1).stop();
        assert_eq!(w.end(), Err(WalkError::UnknownMapElementType(STRING, 0)));
        assert_eq!(
            WalkError::UnknownMapElementType(STRING, 0).to_string(),
            "unknown element type in (11, 0)"
        );
    }

    #[test]
    fn empty_containers_may_carry_junk_types() {
        let w = wire()
            .field(LIST, 1)
            .list(99, 0)
            .field(MAP, 2)
            .map(0, 255, 0)
            .field(SET, 3)
            .list(1, 0)
            .stop();
        assert_eq!(w.end(), Ok(w.0.len()));
    }

    #[test]
    fn valid_nested_containers() {
        // map<string, list<struct{1: string, 2: set<i64>}>>, then list<map<i32, binary>>.
        let job = |body: &[u8]| {
            wire()
                .field(STRING, 1)
                .string(body)
                .field(SET, 2)
                .list(I64, 2)
                .bytes(&[0; 16])
                .stop()
        };
        let w = wire()
            .field(MAP, 1)
            .map(STRING, LIST, 2)
            .string(b"a")
            .list(STRUCT, 2)
            .bytes(&job(b"x").0)
            .bytes(&job(b"\xff").0)
            .string(b"b")
            .list(STRUCT, 0)
            .field(LIST, 2)
            .list(MAP, 1)
            .map(I32, STRING, 2)
            .i32(1)
            .string(b"one")
            .i32(2)
            .string(b"")
            .field(STRUCT, 3)
            .bytes(&flat().0)
            .stop();
        assert_eq!(w.end(), Ok(w.0.len()));
        let mut trailing = w.0.clone();
        trailing.extend_from_slice(b"\x00\x00");
        assert_eq!(struct_end(&trailing, 0), Ok(w.0.len()));
    }

    /// `levels` structs, each the only field of its parent, around an empty struct.
    fn nested_structs(levels: usize) -> Wire {
        let mut w = wire();
        for _ in 0..levels {
            w = w.field(STRUCT, 1);
        }
        for _ in 0..=levels {
            w = w.stop();
        }
        w
    }

    #[test]
    fn struct_depth_is_bounded() {
        let w = nested_structs(MAX_NESTING);
        assert_eq!(w.end(), Ok(w.0.len()));
        assert_eq!(
            nested_structs(MAX_NESTING + 1).end(),
            Err(WalkError::StructsTooDeep)
        );
        assert_eq!(nested_structs(10_000).end(), Err(WalkError::StructsTooDeep));
    }

    /// `levels` lists, each the only element of its parent, around a list of one byte.
    fn nested_lists(levels: usize) -> Wire {
        let mut w = wire().field(LIST, 1);
        for _ in 1..levels {
            w = w.list(LIST, 1);
        }
        w.list(BYTE, 1).bytes(&[7]).stop()
    }

    #[test]
    fn container_depth_is_bounded() {
        // The outer list's elements sit at depth 1, so 32 lists nest fine and 33 do not.
        let w = nested_lists(MAX_NESTING);
        assert_eq!(w.end(), Ok(w.0.len()));
        assert_eq!(
            nested_lists(MAX_NESTING + 1).end(),
            Err(WalkError::ContainersTooDeep)
        );
        // A list of structs counts both: each struct element is one level below its list.
        let lists_of_structs = |levels: usize, inner: &Wire| {
            let mut w = wire();
            for _ in 0..levels {
                w = w.field(LIST, 1).list(STRUCT, 1);
            }
            w = w.bytes(&inner.0);
            for _ in 0..=levels {
                w = w.stop();
            }
            w
        };
        let w = lists_of_structs(16, &wire()); // the innermost struct is at depth 32
        assert_eq!(w.end(), Ok(w.0.len()));
        assert_eq!(
            lists_of_structs(17, &wire()).end(),
            Err(WalkError::ContainersTooDeep)
        );
        let one_more_struct = wire().field(STRUCT, 1).stop();
        assert_eq!(
            lists_of_structs(16, &one_more_struct).end(),
            Err(WalkError::StructsTooDeep)
        );
    }

    #[test]
    fn empty_containers_ignore_depth() {
        let mut w = wire().field(LIST, 1);
        for _ in 1..=MAX_NESTING {
            w = w.list(LIST, 1);
        }
        let w = w.list(LIST, 0).stop();
        assert_eq!(w.end(), Ok(w.0.len()));
    }
}
