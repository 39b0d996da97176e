//! Aligned text tables for people: each column is as wide as its widest cell, so numbers of any
//! width stay under their header.

/// How a column aligns its cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text.
    Left,
    /// Numbers.
    Right,
}

/// Column headers, alignments and widths.
#[derive(Debug, Clone)]
pub struct Columns {
    heads: Vec<(&'static str, Align)>,
    widths: Vec<usize>,
    gap: usize,
}

fn width(s: &str) -> usize {
    s.chars().count()
}

impl Columns {
    /// Columns as wide as their headers.
    pub fn new(heads: &[(&'static str, Align)]) -> Columns {
        Columns { heads: heads.to_vec(), widths: heads.iter().map(|(h, _)| width(h)).collect(), gap: 1 }
    }

    /// Blanks between columns (1 unless set).
    pub fn gap(mut self, gap: usize) -> Columns {
        self.gap = gap;
        self
    }

    /// Widens columns to at least `min` characters each.
    pub fn at_least(mut self, min: &[usize]) -> Columns {
        for (w, m) in self.widths.iter_mut().zip(min) {
            *w = (*w).max(*m);
        }
        self
    }

    /// Widens the columns so that `cells` fit.
    pub fn fit(&mut self, cells: &[String]) {
        for (w, c) in self.widths.iter_mut().zip(cells) {
            *w = (*w).max(width(c));
        }
    }

    /// Columns fitted to every row of `rows`.
    pub fn fitted<'a>(mut self, rows: impl IntoIterator<Item = &'a Vec<String>>) -> Columns {
        for r in rows {
            self.fit(r);
        }
        self
    }

    /// The header line.
    pub fn header(&self) -> String {
        let heads: Vec<String> = self.heads.iter().map(|(h, _)| (*h).to_owned()).collect();
        self.line(&heads)
    }

    /// One row; a cell wider than its column pushes the rest right rather than being cut.
    pub fn line(&self, cells: &[String]) -> String {
        let mut out = String::new();
        let last = cells.len().min(self.heads.len()).saturating_sub(1);
        for (i, cell) in cells.iter().enumerate().take(self.heads.len()) {
            if i > 0 {
                out.push_str(&" ".repeat(self.gap));
            }
            let w = self.widths.get(i).copied().unwrap_or(0);
            let pad = " ".repeat(w.saturating_sub(width(cell)));
            match self.heads.get(i).map(|h| h.1) {
                Some(Align::Right) => {
                    out.push_str(&pad);
                    out.push_str(cell);
                }
                // The last column of a row is not padded: no trailing blanks.
                _ if i == last => out.push_str(cell),
                _ => {
                    out.push_str(cell);
                    out.push_str(&pad);
                }
            }
        }
        out.truncate(out.trim_end().len());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_numbers_widen_their_column_and_keep_the_others_aligned() {
        let heads = [("call", Align::Right), ("tokens", Align::Right), ("what", Align::Left)];
        let rows = [
            vec!["1".to_owned(), "12".to_owned(), "a".to_owned()],
            vec!["100000".to_owned(), "1,234,567,890".to_owned(), "bb".to_owned()],
        ];
        let c = Columns::new(&heads).fitted(&rows);
        let lines: Vec<String> = std::iter::once(c.header()).chain(rows.iter().map(|r| c.line(r))).collect();
        assert_eq!(lines, ["  call        tokens what", "     1            12 a", "100000 1,234,567,890 bb"]);
    }

    #[test]
    fn a_cell_wider_than_a_fixed_column_is_never_cut() {
        let c = Columns::new(&[("n", Align::Right), ("x", Align::Left)]).at_least(&[3, 0]);
        assert_eq!(c.line(&["12345".to_owned(), "y".to_owned()]), "12345 y");
        assert_eq!(c.line(&["1".to_owned(), "y".to_owned()]), "  1 y");
    }
}
