//! Pixel dimensions from image headers (PNG, GIF, JPEG, WebP), so the token estimator can use
//! the provider's size formula instead of a flat cost. Never panics on garbage: unknown → `None`.

/// `(width, height)` if the bytes start with a recognizable image header.
pub fn dimensions(bytes: &[u8]) -> Option<(u32, u32)> {
    png(bytes).or_else(|| gif(bytes)).or_else(|| jpeg(bytes)).or_else(|| webp(bytes))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn le16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn png(b: &[u8]) -> Option<(u32, u32)> {
    // Signature, then the IHDR chunk must come first: length(4) "IHDR" width height.
    if b.get(..8)? != b"\x89PNG\r\n\x1a\n" || b.get(12..16)? != b"IHDR" {
        return None;
    }
    Some((be32(b, 16)?, be32(b, 20)?))
}

fn gif(b: &[u8]) -> Option<(u32, u32)> {
    if !matches!(b.get(..6)?, b"GIF87a" | b"GIF89a") {
        return None;
    }
    Some((u32::from(le16(b, 6)?), u32::from(le16(b, 8)?)))
}

fn jpeg(b: &[u8]) -> Option<(u32, u32)> {
    if b.get(..2)? != [0xFF, 0xD8] {
        return None;
    }
    let mut i = 2;
    // Walk the marker segments up to the first start-of-frame.
    for _ in 0..4096 {
        if *b.get(i)? != 0xFF {
            return None;
        }
        let marker = *b.get(i + 1)?;
        if marker == 0xFF {
            i += 1;
            continue;
        }
        let len = usize::from(be16(b, i + 2)?);
        let is_sof = matches!(marker, 0xC0..=0xCF) && !matches!(marker, 0xC4 | 0xC8 | 0xCC);
        if is_sof {
            return Some((u32::from(be16(b, i + 7)?), u32::from(be16(b, i + 5)?)));
        }
        i += 2 + len;
    }
    None
}

fn webp(b: &[u8]) -> Option<(u32, u32)> {
    if b.get(..4)? != b"RIFF" || b.get(8..12)? != b"WEBP" {
        return None;
    }
    let le24 = |at: usize| -> Option<u32> {
        let s = b.get(at..at + 3)?;
        Some(u32::from(s[0]) | u32::from(s[1]) << 8 | u32::from(s[2]) << 16)
    };
    match b.get(12..16)? {
        b"VP8X" => Some((le24(24)? + 1, le24(27)? + 1)),
        b"VP8 " => Some((u32::from(le16(b, 26)? & 0x3FFF), u32::from(le16(b, 28)? & 0x3FFF))),
        b"VP8L" => {
            let bits = u32::from_le_bytes(b.get(21..25)?.try_into().ok()?);
            Some(((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers() {
        let mut png_bytes = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        png_bytes.extend_from_slice(&1440u32.to_be_bytes());
        png_bytes.extend_from_slice(&900u32.to_be_bytes());
        assert_eq!(dimensions(&png_bytes), Some((1440, 900)));
        assert_eq!(dimensions(b"GIF89a\x10\x00\x20\x00"), Some((16, 32)));
        let jpeg_bytes = [0xFF, 0xD8, 0xFF, 0xE0, 0, 4, 0, 0, 0xFF, 0xC0, 0, 11, 8, 0, 200, 1, 44];
        assert_eq!(dimensions(&jpeg_bytes), Some((300, 200)));
        assert_eq!(dimensions(b"garbage"), None);
        assert_eq!(dimensions(&png_bytes[..20]), None);
        assert_eq!(dimensions(&[0xFF, 0xD8, 0xFF]), None);
    }
}
