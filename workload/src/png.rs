//! A minimal PNG encoder (8-bit RGB, one zlib IDAT) and the synthetic terminal screenshots the
//! human pastes into a session.

use std::io::Write as _;

use crate::rng::Rng;

/// CRC-32 (IEEE, reflected) of the parts in order, as PNG chunks carry it.
pub(crate) fn crc32(parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    parts.iter().for_each(|p| h.update(p));
    h.finalize()
}

fn push_chunk(png: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    png.extend_from_slice(&(data.len() as u32).to_be_bytes());
    png.extend_from_slice(kind);
    png.extend_from_slice(data);
    png.extend_from_slice(&crc32(&[kind, data]).to_be_bytes());
}

/// zlib with stored (uncompressed) blocks: only a fallback so the PNG stays
/// valid if the encoder ever reported an error (it cannot when writing to a Vec).
fn zlib_stored(raw: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let mut chunks = raw.chunks(65_535).peekable();
    if chunks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xFF, 0xFF]);
    }
    while let Some(ch) = chunks.next() {
        out.push(u8::from(chunks.peek().is_none()));
        let len = ch.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(ch);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &x in raw {
        a = (a + u32::from(x)) % 65_521;
        b = (b + a) % 65_521;
    }
    out.extend_from_slice(&((b << 16) | a).to_be_bytes());
    out
}

fn zlib(raw: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    match enc.write_all(raw).and_then(|()| enc.finish()) {
        Ok(v) => v,
        Err(_) => zlib_stored(raw),
    }
}

/// A synthetic dark-theme terminal screenshot (title bar, sidebar, "text"
/// bars, a bar chart): flat areas so it compresses to tens of KB.
pub(crate) fn screenshot(rng: &mut Rng, w: u32, h: u32) -> Vec<u8> {
    const LINE_H: u32 = 18;
    const SIDEBAR: u32 = 220;
    let bands = (h / LINE_H + 1) as usize;
    let palette: [[u8; 3]; 5] = [[212, 212, 212], [86, 156, 214], [206, 145, 120], [106, 153, 85], [220, 220, 170]];
    // Per text line: indent, up to three segments (len, colour).
    let lines: Vec<(u32, [(u32, usize); 3])> = (0..bands)
        .map(|_| {
            let indent = rng.range(0, 4) as u32 * 32;
            let seg = |r: &mut Rng| (r.range(0, 260) as u32, r.below(5) as usize);
            (indent, [seg(rng), seg(rng), seg(rng)])
        })
        .collect();
    let side: Vec<u32> = (0..bands).map(|_| rng.range(40, 170) as u32).collect();
    let chart_top = h * 2 / 3;
    let bars: Vec<u32> = (0..16).map(|_| rng.range(10, u64::from(h - chart_top - 30)) as u32).collect();

    let mut raw = Vec::with_capacity((h as usize) * (1 + 3 * w as usize));
    for y in 0..h {
        raw.push(0); // filter: None
        let band = (y / LINE_H) as usize;
        let in_glyph_row = (5..13).contains(&(y % LINE_H)) && y > 40;
        for x in 0..w {
            let px: [u8; 3] = if y < 28 {
                let dx = i64::from(x) - 20;
                let dy = i64::from(y) - 14;
                if dx * dx + dy * dy < 36 {
                    [255, 95, 86]
                } else {
                    [45, 45, 48]
                }
            } else if x < SIDEBAR {
                if in_glyph_row && x >= 16 && x < 16 + side.get(band).copied().unwrap_or(0) {
                    [150, 150, 150]
                } else {
                    [37, 37, 38]
                }
            } else if y >= chart_top && w > SIDEBAR + 40 {
                let slot = (x - SIDEBAR) * 16 / (w - SIDEBAR);
                let within = (x - SIDEBAR) * 16 % (w - SIDEBAR);
                let bh = bars.get(slot as usize).copied().unwrap_or(0);
                if within > (w - SIDEBAR) / 5 && y >= h - 10 - bh && y < h - 10 {
                    palette.get(slot as usize % 5).copied().unwrap_or([200, 200, 200])
                } else {
                    [24, 24, 24]
                }
            } else {
                let mut c = [30, 30, 30];
                if in_glyph_row {
                    if let Some((indent, segs)) = lines.get(band) {
                        let mut start = SIDEBAR + 20 + indent;
                        for &(len, col) in segs {
                            if x >= start && x < start + len {
                                c = palette.get(col).copied().unwrap_or(c);
                            }
                            start += len + 9;
                        }
                    }
                }
                c
            };
            raw.extend_from_slice(&px);
        }
    }

    encode_png(w, h, &raw)
}

/// A valid 8-bit RGB PNG of `w × h` pixels from `raw`: for each row a filter byte (0) then
/// `3 × w` bytes of RGB. Also used by the tests to make real images.
pub fn encode_png(w: u32, h: u32, raw: &[u8]) -> Vec<u8> {
    let mut png = vec![0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit RGB, deflate, no filter, no interlace
    push_chunk(&mut png, b"IHDR", &ihdr);
    push_chunk(&mut png, b"IDAT", &zlib(raw));
    push_chunk(&mut png, b"IEND", &[]);
    png
}

/// Checks that `png` is a well-formed PNG as [`encode_png`] writes it (signature, IHDR, IDAT,
/// IEND, every CRC, the inflated size) and returns its `(width, height)`. For the tests.
#[cfg(test)]
pub(crate) fn check_png(png: &[u8]) -> (u32, u32) {
    use std::io::Read as _;
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let mut pos = 8;
    let mut kinds = Vec::new();
    let mut idat = Vec::new();
    let mut wh = (0, 0);
    while pos < png.len() {
        let len = u32::from_be_bytes(png[pos..pos + 4].try_into().unwrap()) as usize;
        let kind = &png[pos + 4..pos + 8];
        let data = &png[pos + 8..pos + 8 + len];
        let crc = u32::from_be_bytes(png[pos + 8 + len..pos + 12 + len].try_into().unwrap());
        assert_eq!(crc, crc32(&[kind, data]), "bad CRC");
        match kind {
            b"IHDR" => {
                wh = (
                    u32::from_be_bytes(data[0..4].try_into().unwrap()),
                    u32::from_be_bytes(data[4..8].try_into().unwrap()),
                );
                assert_eq!(&data[8..], &[8, 2, 0, 0, 0]);
            }
            b"IDAT" => idat.extend_from_slice(data),
            _ => {}
        }
        kinds.push(String::from_utf8(kind.to_vec()).unwrap());
        pos += 12 + len;
    }
    assert_eq!(pos, png.len());
    assert_eq!(kinds, ["IHDR", "IDAT", "IEND"]);
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&idat[..]).read_to_end(&mut raw).unwrap();
    assert_eq!(raw.len(), wh.1 as usize * (1 + 3 * wh.0 as usize));
    wh
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    #[test]
    fn crc32_known_value() {
        assert_eq!(crc32(&[b"123456789"]), 0xCBF4_3926);
        assert_eq!(crc32(&[b"IEND"]), 0xAE42_6082);
        // A chunk's CRC runs over its type then its data: the parts are one stream.
        assert_eq!(crc32(&[b"IHDR", b"\x00\x00\x01\x00"]), crc32(&[b"IHDR\x00\x00\x01\x00"]));
        assert_eq!(crc32(&[]), 0);
    }

    #[test]
    fn stored_zlib_fallback_decodes() {
        let raw: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut back = Vec::new();
        flate2::read::ZlibDecoder::new(&zlib_stored(&raw)[..]).read_to_end(&mut back).unwrap();
        assert_eq!(back, raw);
    }

    #[test]
    fn encoded_images_are_valid_pngs_of_their_size() {
        for (w, h) in [(1, 1), (3, 2), (64, 48)] {
            let raw: Vec<u8> =
                (0..h).flat_map(|y| std::iter::once(0).chain((0..3 * w).map(move |x| (x ^ y) as u8))).collect();
            assert_eq!(check_png(&encode_png(w, h, &raw)), (w, h));
        }
        let png = screenshot(&mut Rng(7), 640, 400);
        assert_eq!(check_png(&png), (640, 400));
        assert!(png.len() < 640 * 400 * 3 / 10, "flat areas compress: {} bytes", png.len());
    }
}
