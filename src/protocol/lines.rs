//! Where a line of a worker's output ends: its stdout is read as it grows, a chunk at a
//! time, into lines of bounded length that [`LineParser`](super::LineParser) then reads.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// The longest line read, in bytes: of a longer line, the first `MAX_LINE` bytes are parsed
/// and the rest is skipped, so that a worker's output costs the controller no more memory
/// whatever it prints (docs/worker-protocol.md).
const MAX_LINE: usize = 64 * 1024;
/// How much of a growing file is read at a time.
const CHUNK: usize = 64 * 1024;

/// Reads a growing file (a worker's stdout) line by line, `CHUNK` bytes at a time. A line
/// ends at `\n` or at a lone `\r` (a progress bar redrawn in place prints many of those and
/// no `\n`).
#[derive(Debug, Default)]
pub(crate) struct LineReader {
    offset: u64,
    /// The line read so far, up to `MAX_LINE` bytes.
    partial: Vec<u8>,
    /// Whether the last line read ended at `\r`: a `\n` right after it ends no other line.
    after_cr: bool,
    /// The buffer reads go into, kept between reads.
    chunk: Vec<u8>,
}

impl LineReader {
    /// Gives `line` each complete line added since the last call, in order.
    pub(crate) fn read_new(&mut self, path: &Path, mut line: impl FnMut(&str)) {
        let Ok(mut file) = File::open(path) else {
            return;
        };
        let grown = file.metadata().is_ok_and(|m| m.len() > self.offset);
        if !grown || file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut chunk = std::mem::take(&mut self.chunk);
        chunk.resize(CHUNK, 0);
        while let Ok(read @ 1..) = file.read(&mut chunk) {
            self.offset += read as u64;
            self.split(&chunk[..read], &mut line);
        }
        self.chunk = chunk;
    }

    /// Adds `bytes` to the line read so far, giving `line` each line they complete.
    fn split(&mut self, bytes: &[u8], line: &mut impl FnMut(&str)) {
        for piece in bytes.split_inclusive(|b| matches!(b, b'\n' | b'\r')) {
            let (text, ended) = match piece.split_last() {
                Some((b'\n' | b'\r', text)) => (text, true),
                _ => (piece, false),
            };
            let crlf = std::mem::replace(&mut self.after_cr, piece.ends_with(b"\r"));
            if crlf && piece == b"\n" {
                continue;
            }
            let room = MAX_LINE - self.partial.len();
            self.partial
                .extend_from_slice(&text[..text.len().min(room)]);
            if ended {
                line(&String::from_utf8_lossy(&self.partial));
                self.partial.clear();
            }
        }
    }

    /// A last line without its line break, once the writer is gone.
    pub(crate) fn rest(&mut self) -> Option<String> {
        let rest = String::from_utf8_lossy(&std::mem::take(&mut self.partial)).into_owned();
        (!rest.trim().is_empty()).then_some(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::LineParser;

    /// The lines `reader` reads from `path` now.
    fn lines(reader: &mut LineReader, path: &Path) -> Vec<String> {
        let mut lines = Vec::new();
        reader.read_new(path, |line| lines.push(line.to_string()));
        lines
    }

    #[test]
    fn gives_each_complete_line_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let mut reader = LineReader::default();
        assert!(lines(&mut reader, &path).is_empty());
        std::fs::write(&path, "a=1\nb=").unwrap();
        assert_eq!(lines(&mut reader, &path), ["a=1"]);
        std::fs::write(&path, "a=1\nb=2\r\n\nc").unwrap();
        assert_eq!(lines(&mut reader, &path), ["b=2", ""]);
        assert_eq!(reader.rest().as_deref(), Some("c"));
    }

    /// A progress bar redrawn with `\r` ends a line at each redraw: its text is not kept
    /// until a `\n` that may never come.
    #[test]
    fn ends_a_line_at_a_lone_carriage_return() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        std::fs::write(&path, "10%\r20%\rstep=1 loss=0.5\r").unwrap();
        let mut reader = LineReader::default();
        assert_eq!(lines(&mut reader, &path), ["10%", "20%", "step=1 loss=0.5"]);
        assert_eq!(reader.rest(), None);
        // A `\r\n` split between two reads is one line end.
        std::fs::write(&path, "10%\r20%\rstep=1 loss=0.5\r\nloss=0.25\n").unwrap();
        assert_eq!(lines(&mut reader, &path), ["loss=0.25"]);
    }

    /// A 100 MB line without a line break (a sparse file: written in no time) is read in
    /// chunks into a buffer of at most `MAX_LINE` bytes; the line is cut to its first
    /// `MAX_LINE` bytes, which are parsed, and the lines after it are read as usual.
    #[test]
    fn keeps_a_bounded_prefix_of_a_huge_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let mut file = File::create(&path).unwrap();
        std::io::Write::write_all(&mut file, b"step=7 loss=0.25 ").unwrap();
        let huge = 100 << 20;
        file.set_len(huge).unwrap();
        let mut reader = LineReader::default();
        assert!(lines(&mut reader, &path).is_empty());
        assert_eq!(reader.partial.len(), MAX_LINE);
        assert!(reader.partial.capacity() <= 2 * MAX_LINE);
        file.seek(SeekFrom::End(0)).unwrap();
        std::io::Write::write_all(&mut file, b"\nloss=0.5\n").unwrap();
        let read = lines(&mut reader, &path);
        assert_eq!(read.len(), 2);
        assert_eq!(read[0].len(), MAX_LINE);
        assert_eq!(read[1], "loss=0.5");
        assert!(reader.partial.capacity() <= 2 * MAX_LINE);
        let parser = LineParser::new("loss");
        let step = |line: &str| parser.parse(line).first().and_then(|m| m.step);
        assert_eq!(step(&read[0]), Some(7));
    }
}
