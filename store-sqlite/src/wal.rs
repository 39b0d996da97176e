//! Reading a `-wal` file before SQLite does, to see what its recovery would silently drop.
//!
//! SQLite's WAL recovery (format: <https://www.sqlite.org/fileformat2.html#walformat>) keeps
//! the frames up to the first one that fails its checks (salts equal to the header's, a
//! checksum chained from the previous frame) and then the last commit among them. A flipped bit
//! in frame *k* therefore drops every transaction committed after *k*, without an error, and the
//! next checkpoint makes that permanent. This module replays that rule, and also looks at what
//! the file holds beyond it: a frame is *linked* when its checksum follows from the stored
//! checksum of the frame before it (or from that checksum with one bit flipped, which is what a
//! flip in the previous frame's checksum field looks like). A linked commit frame of the
//! current generation after the point where SQLite stops is a transaction SQLite would lose.
//!
//! What cannot be told apart: damage inside the last transaction of the file, with nothing
//! linked after it, looks exactly like a torn write of an unacknowledged transaction, which is
//! what recovery exists to drop. The store keeps acknowledged data out of that position by
//! checkpointing after every write (`lib.rs`).

use std::path::Path;

const HEADER_LEN: usize = 32;
const FRAME_HEADER_LEN: usize = 24;
const MAGIC_LE: u32 = 0x377f_0682;
const MAGIC_BE: u32 = 0x377f_0683;
const VERSION: u32 = 3_007_000;

fn be32(b: &[u8], at: usize) -> Option<u32> {
    let s: [u8; 4] = b.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_be_bytes(s))
}

fn word(b: &[u8], big_endian: bool) -> u32 {
    let s = [b.first().copied(), b.get(1).copied(), b.get(2).copied(), b.get(3).copied()].map(|x| x.unwrap_or(0));
    if big_endian {
        u32::from_be_bytes(s)
    } else {
        u32::from_le_bytes(s)
    }
}

/// SQLite's WAL checksum of `data` (a multiple of 8 bytes) continuing from `seed`.
fn checksum(data: &[u8], big_endian: bool, seed: (u32, u32)) -> (u32, u32) {
    let (mut s0, mut s1) = seed;
    for pair in data.chunks_exact(8) {
        let (x0, x1) = pair.split_at(4);
        s0 = s0.wrapping_add(word(x0, big_endian)).wrapping_add(s1);
        s1 = s1.wrapping_add(word(x1, big_endian)).wrapping_add(s0);
    }
    (s0, s1)
}

/// The seed from which [`checksum`] of `data` gives `result` (the checksum is invertible).
fn seed_of(data: &[u8], big_endian: bool, result: (u32, u32)) -> (u32, u32) {
    let (mut s0, mut s1) = result;
    for pair in data.chunks_exact(8).rev() {
        let (x0, x1) = pair.split_at(4);
        s1 = s1.wrapping_sub(word(x1, big_endian)).wrapping_sub(s0);
        s0 = s0.wrapping_sub(word(x0, big_endian)).wrapping_sub(s1);
    }
    (s0, s1)
}

fn bits_apart(a: (u32, u32), b: (u32, u32)) -> u32 {
    (a.0 ^ b.0).count_ones() + (a.1 ^ b.1).count_ones()
}

/// One way to read the frames: page size and checksum byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    page_size: usize,
    big_endian: bool,
}

/// What a `-wal` file holds, and what SQLite's recovery would make of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct WalScan {
    /// Whole frames in the file (under the header's page size).
    pub(crate) frames: u64,
    /// Frames SQLite's recovery keeps: up to and including its last valid commit frame.
    pub(crate) kept: u64,
    /// Committed transactions among the kept frames.
    pub(crate) kept_commits: u64,
    /// Set when the file holds committed transactions that recovery would drop.
    pub(crate) damage: Option<String>,
}

struct Header {
    valid: bool,
    layout: Option<Layout>,
    salts: (u32, u32),
    stored: (u32, u32),
}

fn header(bytes: &[u8]) -> Header {
    let field = |at| be32(bytes, at).unwrap_or(0);
    let magic = field(0);
    let page_size = field(8);
    let sane = page_size.is_power_of_two() && (512..=65_536).contains(&page_size);
    let big_endian = magic == MAGIC_BE;
    let layout = sane.then_some(Layout { page_size: page_size as usize, big_endian });
    let stored = (field(24), field(28));
    let valid = (magic == MAGIC_LE || magic == MAGIC_BE)
        && field(4) == VERSION
        && sane
        && bytes.len() >= HEADER_LEN
        && checksum(bytes.get(..24).unwrap_or_default(), big_endian, (0, 0)) == stored;
    Header { valid, layout, salts: (field(16), field(20)), stored }
}

struct Frame<'a> {
    commit: bool,
    pgno: u32,
    salts: (u32, u32),
    stored: (u32, u32),
    /// The first 8 bytes of the frame header and the page: what the checksum covers.
    covered: [&'a [u8]; 2],
}

fn frames(bytes: &[u8], layout: Layout) -> Vec<Frame<'_>> {
    let size = FRAME_HEADER_LEN + layout.page_size;
    let body = bytes.get(HEADER_LEN..).unwrap_or_default();
    body.chunks_exact(size)
        .map(|f| {
            let field = |at| be32(f, at).unwrap_or(0);
            Frame {
                commit: field(4) != 0,
                pgno: field(0),
                salts: (field(8), field(12)),
                stored: (field(16), field(20)),
                covered: [f.get(..8).unwrap_or_default(), f.get(FRAME_HEADER_LEN..).unwrap_or_default()],
            }
        })
        .collect()
}

fn frame_checksum(f: &Frame<'_>, big_endian: bool, seed: (u32, u32)) -> (u32, u32) {
    checksum(f.covered[1], big_endian, checksum(f.covered[0], big_endian, seed))
}

fn frame_seed(f: &Frame<'_>, big_endian: bool) -> (u32, u32) {
    seed_of(f.covered[0], big_endian, seed_of(f.covered[1], big_endian, f.stored))
}

/// SQLite's recovery: `(frames kept, commits among them, index of the first bad frame)`.
fn recovery(h: &Header, frames: &[Frame<'_>], big_endian: bool) -> (u64, u64, Option<usize>) {
    if !h.valid {
        return (0, 0, Some(0));
    }
    let (mut seed, mut kept, mut commits) = (h.stored, 0, 0);
    for (i, f) in frames.iter().enumerate() {
        let sum = frame_checksum(f, big_endian, seed);
        if f.pgno == 0 || f.salts != h.salts || sum != f.stored {
            return (kept, commits, Some(i));
        }
        seed = sum;
        if f.commit {
            kept = i as u64 + 1;
            commits += 1;
        }
    }
    (kept, commits, None)
}

/// The last commit frame (1-based count of frames up to it) that is linked to its predecessor
/// and belongs to the current generation, under `layout`.
fn last_linked_commit(h: &Header, frames: &[Frame<'_>], big_endian: bool) -> u64 {
    let linked = |i: usize, f: &Frame<'_>| {
        let prev = if i == 0 { h.stored } else { frames.get(i - 1).map_or(h.stored, |p| p.stored) };
        f.pgno != 0 && bits_apart(frame_seed(f, big_endian), prev) <= 1
    };
    // The generation: the header's salts if the header holds, else those of the first frame
    // that links (a damaged header leaves the frames' own salts intact).
    let salts = if h.valid {
        Some(h.salts)
    } else {
        frames.iter().enumerate().find(|(i, f)| linked(*i, f)).map(|(_, f)| f.salts)
    };
    let Some(salts) = salts else { return 0 };
    frames
        .iter()
        .enumerate()
        .filter(|(i, f)| f.commit && f.salts == salts && linked(*i, f))
        .map(|(i, _)| i as u64 + 1)
        .max()
        .unwrap_or(0)
}

/// The `-shm` (WAL index) of the writer that wrote the `-wal` says how many frames it held
/// (`mxFrame` of its header, <https://www.sqlite.org/walformat.html#the_wal_index_file_format>).
/// A `-wal` whose recovery keeps fewer frames of the same generation (the same salts) was cut
/// short: SQLite would rebuild the index from what is left and lose the rest without an error.
/// Only a header whose two copies agree, that is initialised and whose checksum holds counts,
/// and only a loss of more than one frame (see below).
fn cut_short(bytes: &[u8], kept: u64, name: &Path, shm: Option<&[u8]>) -> Option<String> {
    let shm = shm?;
    let (copy1, copy2) = (shm.get(..48)?, shm.get(48..96)?);
    let native = |at: usize| {
        let b: [u8; 4] = copy1.get(at..at + 4)?.try_into().ok()?;
        Some(if cfg!(target_endian = "big") { u32::from_be_bytes(b) } else { u32::from_le_bytes(b) })
    };
    let sum = checksum(copy1.get(..40)?, cfg!(target_endian = "big"), (0, 0));
    let valid =
        copy1 == copy2 && native(0)? == VERSION && copy1.get(12) == Some(&1) && (native(40)?, native(44)?) == sum;
    // The salts are copied byte for byte from the WAL header into the index header.
    let wal_salts = bytes.get(16..24);
    if !valid || (wal_salts.is_some() && wal_salts != copy1.get(32..40)) {
        return None;
    }
    // One frame short is tolerated: the store's seal, a one-page transaction written without
    // an fsync after every append, may be all a power cut took (it holds nothing acknowledged).
    let claimed = u64::from(native(16)?);
    (claimed > kept + 1).then(|| {
        format!(
            "{}: the WAL index (-shm) says the WAL held {claimed} frames of this generation, but only {kept} are \
             left: the -wal was cut short, and SQLite's recovery would drop the missing {} frames (committed \
             transactions) without an error",
            name.display(),
            claimed - kept
        )
    })
}

/// Scans the bytes of a `-wal` file, with its `-shm` if there is one; `name` is used in the
/// damage report.
pub(crate) fn scan(bytes: &[u8], name: &Path, shm: Option<&[u8]>) -> WalScan {
    let scanned = scan_frames(bytes, name);
    match scanned.damage {
        Some(_) => scanned,
        None => WalScan { damage: cut_short(bytes, scanned.kept, name, shm), ..scanned },
    }
}

fn scan_frames(bytes: &[u8], name: &Path) -> WalScan {
    if bytes.len() < HEADER_LEN {
        return WalScan::default();
    }
    let h = header(bytes);
    let Some(layout) = h.layout.filter(|_| h.valid) else {
        // SQLite ignores a WAL whose header fails; does it hold commits under any layout?
        let mut best = (0, None);
        for page_size in (9..=16).map(|p| 1usize << p) {
            for big_endian in [false, true] {
                let layout = Layout { page_size, big_endian };
                let n = last_linked_commit(&h, &frames(bytes, layout), big_endian);
                if n > best.0 {
                    best = (n, Some(layout));
                }
            }
        }
        let frames_total = h.layout.map_or(0, |l| frames(bytes, l).len() as u64);
        let damage = best.1.map(|l| {
            format!(
                "{}: the WAL header fails its checks, so SQLite would ignore the whole file, but it holds {} frames \
                 of committed transactions (page size {}): SQLite's recovery would drop them without an error",
                name.display(),
                best.0,
                l.page_size
            )
        });
        return WalScan { frames: frames_total, kept: 0, kept_commits: 0, damage };
    };
    let all = frames(bytes, layout);
    let (kept, kept_commits, first_bad) = recovery(&h, &all, layout.big_endian);
    let evident = last_linked_commit(&h, &all, layout.big_endian);
    let damage = (evident > kept).then(|| {
        let bad = first_bad.unwrap_or(0);
        let offset = HEADER_LEN + bad * (FRAME_HEADER_LEN + layout.page_size);
        format!(
            "{}: frame {} (offset {offset}) fails SQLite's checks, but the frames up to {evident} hold later committed \
             transactions: SQLite's recovery would keep only the first {kept} frames and drop the rest without an \
             error",
            name.display(),
            bad + 1
        )
    });
    WalScan { frames: all.len() as u64, kept, kept_commits, damage }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_of_inverts_checksum() {
        let data: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37)).collect();
        for be in [false, true] {
            let seed = (0xdead_beef, 0x1234_5678);
            assert_eq!(seed_of(&data, be, checksum(&data, be, seed)), seed);
        }
    }
}
