//! The machine's CBLAS library (Intel MKL or OpenBLAS), opened at run time for the CPU's
//! matrix products.
//!
//! burn-flex multiplies with the `gemm` crate, which runs at about half of OpenBLAS's speed on
//! MiniLM's shapes on this project's machines (`cargo run --release --example matmul_speed -p
//! hptune-trainer`), and matrix products are half of a training step; MKL's single-threaded
//! `sgemm` takes about a tenth less CPU time than OpenBLAS's on the products of a training step
//! on SST-2 sentences (docs/trainer.md, "Speed"). The trainer therefore uses MKL when it finds
//! it, else OpenBLAS, else burn's own products: a library is a speed-up, never a requirement
//! (no link-time dependency; `scripts/install-blas.sh` installs both).
//!
//! `HPTUNE_BLAS` chooses: a library's file name or path, or `none` for burn's products; unset,
//! the usual names of MKL's runtime library and then of OpenBLAS are tried. The library runs
//! single-threaded (MKL's sequential layer): [`Cblas::sgemm_to`] splits a product's rows over
//! rayon's threads (burn-flex's), so no BLAS thread pool spins beside them.

use std::sync::OnceLock;

use libloading::Library;
use rayon::prelude::*;

/// The names tried when `HPTUNE_BLAS` is unset, in order: MKL's runtime library, then
/// OpenBLAS.
const DEFAULT_NAMES: [&str; 6] = [
    "libmkl_rt.so.3",
    "libmkl_rt.so.2",
    "libmkl_rt.dylib",
    "libopenblas.so.0",
    "libopenblas.so",
    "libopenblas.dylib",
];

/// `MKL_THREADING_SEQUENTIAL`, the argument of `MKL_Set_Threading_Layer`.
const MKL_THREADING_SEQUENTIAL: i32 = 1;

/// `MKL_INTERFACE_LP64`, the argument of `MKL_Set_Interface_Layer`: 32-bit integers, as the
/// `cblas_sgemm` declaration here (`MKL_INTERFACE_LAYER=ILP64` in the environment would
/// otherwise make MKL read them as 64-bit ones).
const MKL_INTERFACE_LP64: i32 = 0;

/// `MKL_CBWR_AUTO | MKL_CBWR_STRICT`, the argument of `MKL_CBWR_Set`: the same results for
/// the same inputs whatever their alignment in memory, so that a seed gives the same run (about
/// 1.5 % of a training step's speed).
const MKL_CBWR_AUTO_STRICT: i32 = 2 | 0x10000;

/// The libraries that MKL's runtime library loads at its first call (with its CPU kernels):
/// without one it ends the process instead of failing the call.
const MKL_LAYERS: [&str; 3] = ["libmkl_core", "libmkl_sequential", "libmkl_intel_lp64"];

/// Products below this many multiply-adds run on the calling thread.
const PARALLEL_WORK: usize = 1 << 18;

/// `cblas_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)`.
type Sgemm = unsafe extern "C" fn(
    i32,
    i32,
    i32,
    i32,
    i32,
    i32,
    f32,
    *const f32,
    i32,
    *const f32,
    i32,
    f32,
    *mut f32,
    i32,
);

/// `openblas_set_num_threads(n)` and its equivalents.
type SetThreads = unsafe extern "C" fn(i32);

/// `MKL_Set_Threading_Layer(layer)`, `MKL_Set_Interface_Layer(layer)` and `MKL_CBWR_Set(mode)`:
/// each takes one of MKL's constants and returns the layer set or a status.
type MklSetting = unsafe extern "C" fn(i32) -> i32;

const ROW_MAJOR: i32 = 101;
const NO_TRANSPOSE: i32 = 111;
const TRANSPOSE: i32 = 112;

/// An opened CBLAS library.
pub(crate) struct Cblas {
    sgemm: Sgemm,
    name: String,
    _library: Library,
}

/// A matrix operand: `rows x cols` elements of `data`, element `(i, j)` at
/// `i * row_stride + j * col_stride`, one of the two strides 1 (a row-major matrix or the
/// transpose of one, as BLAS reads them).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Matrix<'a> {
    /// The elements, from the first one on.
    pub data: &'a [f32],
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
    /// Distance between rows.
    pub row_stride: usize,
    /// Distance between columns.
    pub col_stride: usize,
}

impl<'a> Matrix<'a> {
    /// The matrix, or `None` when BLAS cannot read it (neither stride 1, strides that do not fit
    /// BLAS's 32-bit integers, or elements beyond `data`).
    pub(crate) fn new(
        data: &'a [f32],
        rows: usize,
        cols: usize,
        row_stride: usize,
        col_stride: usize,
    ) -> Option<Self> {
        let matrix = Self {
            data,
            rows,
            cols,
            row_stride,
            col_stride,
        };
        let last = (rows.max(1) - 1) * row_stride + (cols.max(1) - 1) * col_stride;
        let fits = [rows, cols, matrix.leading_dimension()]
            .iter()
            .all(|&n| i32::try_from(n).is_ok());
        (matrix.transposed().is_some() && fits && (rows * cols == 0 || last < data.len()))
            .then_some(matrix)
    }

    /// Whether BLAS reads it transposed (column stride not 1), or `None` if it cannot read it.
    fn transposed(&self) -> Option<bool> {
        // Stored rows (or columns) must not overlap: a broadcast view's stride 0 cannot be read.
        let rows_apart = self.rows <= 1 || self.row_stride >= self.cols;
        let cols_apart = self.cols <= 1 || self.col_stride >= self.rows;
        if (self.col_stride == 1 || self.cols == 1) && rows_apart {
            Some(false)
        } else if (self.row_stride == 1 || self.rows == 1) && cols_apart {
            Some(true)
        } else {
            None
        }
    }

    /// BLAS's leading dimension: the distance between stored rows, at least their length.
    fn leading_dimension(&self) -> usize {
        match self.transposed() {
            Some(false) => self.row_stride.max(self.cols).max(1),
            _ => self.col_stride.max(self.rows).max(1),
        }
    }

    /// The transposed matrix (a view: the strides swapped).
    pub(crate) fn transpose(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    /// Rows `start..start + count`.
    fn rows_from(&self, start: usize, count: usize) -> Self {
        let offset = (start * self.row_stride).min(self.data.len());
        Self {
            data: &self.data[offset..],
            rows: count,
            ..*self
        }
    }
}

impl Cblas {
    /// The library chosen by `HPTUNE_BLAS` (see the module documentation), opened on first use;
    /// `None` when there is none.
    pub(crate) fn get() -> Option<&'static Cblas> {
        static LIBRARY: OnceLock<Option<Cblas>> = OnceLock::new();
        LIBRARY
            .get_or_init(|| {
                let choice = std::env::var("HPTUNE_BLAS").ok();
                let library = match choice.as_deref() {
                    Some("none") => None,
                    Some(name) => Self::open(name),
                    None => DEFAULT_NAMES.iter().find_map(|name| Self::open(name)),
                };
                match (&library, choice.as_deref()) {
                    (Some(blas), _) => tracing::info!("matrix products by {}", blas.name),
                    (None, Some("none")) => {
                        tracing::info!("matrix products by burn (HPTUNE_BLAS=none)")
                    }
                    (None, Some(name)) => tracing::warn!(
                        "HPTUNE_BLAS={name}: no CBLAS library with cblas_sgemm found there; \
                         matrix products by burn, about half as fast"
                    ),
                    (None, None) => tracing::info!(
                        "neither MKL nor OpenBLAS found (scripts/install-blas.sh installs \
                         them): matrix products by burn, about half as fast"
                    ),
                }
                library
            })
            .as_ref()
    }

    /// Opens `name` if it is a library with `cblas_sgemm`, and makes it single-threaded.
    fn open(name: &str) -> Option<Self> {
        // SAFETY: loading runs the library's initialisers; a BLAS library's only set up its
        // thread pool and CPU detection.
        let library = unsafe { Library::new(name) }.ok()?;
        // SAFETY: the symbol has the type of the CBLAS standard's declaration.
        let sgemm = *unsafe { library.get::<Sgemm>(b"cblas_sgemm\0") }.ok()?;
        if !Self::configure_mkl(&library, name) {
            return None;
        }
        for setter in [&b"openblas_set_num_threads\0"[..], b"MKL_Set_Num_Threads\0"] {
            // SAFETY: both take the number of threads as a C int.
            if let Ok(set_threads) = unsafe { library.get::<SetThreads>(setter) } {
                unsafe { set_threads(1) };
            }
        }
        Some(Self {
            sgemm,
            name: name.to_string(),
            _library: library,
        })
    }

    /// Sets up MKL's runtime library before its first call: LP64 integers, the sequential
    /// threading layer (no OpenMP runtime, no threads of its own) and reproducible results.
    /// `false` (with a warning) when the layers it would load are missing; `true` for any
    /// other library.
    fn configure_mkl(library: &Library, name: &str) -> bool {
        let setting = |symbol: &[u8]| {
            // SAFETY: each symbol has the type of MKL's declaration.
            unsafe { library.get::<MklSetting>(symbol) }
                .ok()
                .map(|f| *f)
        };
        let Some(set_threading) = setting(b"MKL_Set_Threading_Layer\0") else {
            return true;
        };
        // MKL's runtime looks for its layers beside itself first (where every installation of
        // it puts them): a layer that is not there is taken as missing.
        let loaded = loaded_from(set_threading as *const std::ffi::c_void)
            .unwrap_or_else(|| std::path::PathBuf::from(name));
        let file = loaded.file_name().and_then(|f| f.to_str()).unwrap_or(name);
        let suffix = file.split_once("mkl_rt").map_or(".so", |(_, rest)| rest);
        let missing: Vec<String> = MKL_LAYERS
            .iter()
            .map(|layer| loaded.with_file_name(format!("{layer}{suffix}")))
            .filter(|layer| !layer.is_file())
            .map(|layer| layer.display().to_string())
            .collect();
        if !missing.is_empty() {
            tracing::warn!(
                "{}: MKL's runtime without {} (scripts/install-blas.sh installs them all); \
                 not used",
                loaded.display(),
                missing.join(", ")
            );
            return false;
        }
        // SAFETY: each takes one of MKL's constants, before any other call of MKL.
        unsafe {
            if let Some(set_interface) = setting(b"MKL_Set_Interface_Layer\0") {
                set_interface(MKL_INTERFACE_LP64);
            }
            set_threading(MKL_THREADING_SEQUENTIAL);
            if let Some(set_cbwr) = setting(b"MKL_CBWR_Set\0")
                && set_cbwr(MKL_CBWR_AUTO_STRICT) != 0
            {
                tracing::warn!("{name}: reproducible mode refused: a seed may not repeat a run");
            }
        }
        true
    }

    /// `output = a · b`, `output` row-major `a.rows x b.cols`, every element written (its
    /// previous contents are never read: it may be uninitialised); the rows are split over
    /// rayon's threads when the product is large enough.
    ///
    /// # Panics
    /// If the shapes do not match or `output` has the wrong length.
    #[cfg(test)]
    pub(crate) fn sgemm(&self, a: Matrix, b: Matrix, output: &mut [std::mem::MaybeUninit<f32>]) {
        assert_eq!(output.len(), a.rows * b.cols, "sgemm: output size");
        // SAFETY: `output` holds the `a.rows` rows of `b.cols` elements, and is borrowed
        // mutably for the call.
        unsafe { self.sgemm_to(a, b, output.as_mut_ptr().cast(), b.cols, true) }
    }

    /// `a · b` written to `output`: `a.rows` rows of `b.cols` elements, row `i` from
    /// `output + i * ldc`. Previous contents are never read. With `split`, the rows are split
    /// over rayon's threads when the product is large enough; otherwise it is one call of
    /// `cblas_sgemm` on the calling thread.
    ///
    /// # Safety
    /// Those elements of `output` must be valid for writes, and nothing else may access them
    /// during the call.
    ///
    /// # Panics
    /// If the inner dimensions differ, `ldc < b.cols`, or `ldc` exceeds an i32.
    pub(crate) unsafe fn sgemm_to(
        &self,
        a: Matrix,
        b: Matrix,
        output: *mut f32,
        ldc: usize,
        split: bool,
    ) {
        let (m, n, k) = (a.rows, b.cols, a.cols);
        assert_eq!(k, b.rows, "sgemm: inner dimensions differ");
        assert!(
            ldc >= n && i32::try_from(ldc).is_ok(),
            "sgemm: output stride {ldc}"
        );
        if m * n == 0 {
            return;
        }
        let threads = rayon::current_num_threads();
        if split && m * n * k >= PARALLEL_WORK && threads > 1 && m >= 2 * threads {
            let rows_per_part = m.div_ceil(threads);
            let output = SharedOutput(output);
            (0..m.div_ceil(rows_per_part))
                .into_par_iter()
                .for_each(|part| {
                    let start = part * rows_per_part;
                    let rows = rows_per_part.min(m - start);
                    // SAFETY: the parts' rows are disjoint, and within the caller's rows.
                    unsafe {
                        let part_output = output.at(start * ldc);
                        self.sgemm_to(a.rows_from(start, rows), b, part_output, ldc, false);
                    }
                });
            return;
        }
        if k == 0 {
            for i in 0..m {
                // SAFETY: row `i` of the caller's output.
                unsafe { std::ptr::write_bytes(output.add(i * ldc), 0, n) };
            }
            return;
        }
        let transpose = |matrix: &Matrix| match matrix.transposed() {
            Some(true) => TRANSPOSE,
            _ => NO_TRANSPOSE,
        };
        // SAFETY: `Matrix::new` checked that every element BLAS reads lies in `data` and that
        // the sizes fit an i32; the caller vouches for the output rows, which BLAS writes
        // without reading them (beta is 0).
        unsafe {
            (self.sgemm)(
                ROW_MAJOR,
                transpose(&a),
                transpose(&b),
                m as i32,
                n as i32,
                k as i32,
                1.0,
                a.data.as_ptr(),
                a.leading_dimension() as i32,
                b.data.as_ptr(),
                b.leading_dimension() as i32,
                0.0,
                output,
                ldc as i32,
            );
        }
    }
}

/// The file the dynamic loader opened for the library that holds `symbol`.
fn loaded_from(symbol: *const std::ffi::c_void) -> Option<std::path::PathBuf> {
    // SAFETY: an all-zero `Dl_info` is valid (null pointers), and dladdr only writes it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr reads no memory at the address; it looks it up among loaded objects.
    if unsafe { libc::dladdr(symbol, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr gave a NUL-terminated path that lives as long as the library is loaded.
    let path = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    path.to_str().ok().map(std::path::PathBuf::from)
}

/// An output pointer that the threads of one product share, each writing its own elements.
#[derive(Clone, Copy)]
pub(crate) struct SharedOutput(pub *mut f32);

// SAFETY: the products that share it write disjoint elements (see their callers).
unsafe impl Send for SharedOutput {}
unsafe impl Sync for SharedOutput {}

impl SharedOutput {
    /// The element `offset` elements on.
    ///
    /// # Safety
    /// It must lie in the same allocation.
    pub(crate) unsafe fn at(self, offset: usize) -> *mut f32 {
        unsafe { self.0.add(offset) }
    }
}

/// The library, or `None` (and a note) where none is installed; `HPTUNE_TEST_BLAS=required`
/// (set by `.ci/run`, which installs MKL and OpenBLAS) makes its absence a failure.
#[cfg(test)]
pub(crate) fn library_for_test() -> Option<&'static Cblas> {
    let library = Cblas::get();
    if library.is_none() {
        assert_ne!(
            std::env::var("HPTUNE_TEST_BLAS").as_deref(),
            Ok("required"),
            "HPTUNE_TEST_BLAS=required but no BLAS library was found (scripts/install-blas.sh)"
        );
        eprintln!("no BLAS library here: its products are not tested");
    }
    library
}

/// Every library of the default names that this machine has (MKL and OpenBLAS where both
/// are installed); `HPTUNE_TEST_BLAS=required` makes finding none a failure.
#[cfg(test)]
fn installed_for_test() -> &'static [Cblas] {
    // Kept open for the process, as `Cblas::get`'s library is: a BLAS library is not unloaded.
    static LIBRARIES: OnceLock<Vec<Cblas>> = OnceLock::new();
    let libraries = LIBRARIES.get_or_init(|| {
        DEFAULT_NAMES
            .iter()
            .filter_map(|name| Cblas::open(name))
            .collect()
    });
    if libraries.is_empty() {
        library_for_test();
    }
    libraries
}

#[cfg(test)]
mod tests {
    use std::mem::MaybeUninit;

    use super::{Matrix, installed_for_test};

    /// `a · b` by the definition, for `a` and `b` given by element functions.
    fn reference(
        m: usize,
        k: usize,
        n: usize,
        a: impl Fn(usize, usize) -> f32,
        b: impl Fn(usize, usize) -> f32,
    ) -> Vec<f32> {
        let mut c = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k)
                    .map(|p| f64::from(a(i, p)) * f64::from(b(p, j)))
                    .sum::<f64>() as f32;
            }
        }
        c
    }

    fn value(seed: usize, i: usize) -> f32 {
        ((i as f64 + 1.0) * (0.754877 * seed as f64 + 0.569840)).sin() as f32
    }

    #[test]
    fn products_of_plain_transposed_and_strided_operands_match_the_definition() {
        for blas in installed_for_test() {
            eprintln!("products of {}", blas.name);
            products_match_the_definition(blas);
        }
    }

    fn products_match_the_definition(blas: &super::Cblas) {
        // Large enough to be split over threads (600 rows) and small; operands stored
        // row-major, transposed, and as every other row of a wider buffer.
        for (m, k, n) in [(600, 70, 90), (3, 5, 2), (1, 4, 1)] {
            let a_data: Vec<f32> = (0..2 * m * k).map(|i| value(1, i)).collect();
            let b_data: Vec<f32> = (0..2 * k * n).map(|i| value(2, i)).collect();
            let a_plain = |i: usize, p: usize| a_data[i * k + p];
            let b_plain = |p: usize, j: usize| b_data[p * n + j];
            let expected = reference(m, k, n, a_plain, b_plain);
            let a_transposed: Vec<f32> = (0..k * m).map(|x| a_plain(x % m, x / m)).collect();
            let b_transposed: Vec<f32> = (0..n * k).map(|x| b_plain(x % k, x / k)).collect();
            let a_wide: Vec<f32> = (0..m * 2 * k)
                .map(|x| {
                    if x % (2 * k) < k {
                        a_plain(x / (2 * k), x % (2 * k))
                    } else {
                        9.0
                    }
                })
                .collect();
            let a_forms = [
                Matrix::new(&a_data, m, k, k, 1).unwrap(),
                Matrix::new(&a_transposed, m, k, 1, m).unwrap(),
                Matrix::new(&a_wide, m, k, 2 * k, 1).unwrap(),
            ];
            let b_forms = [
                Matrix::new(&b_data, k, n, n, 1).unwrap(),
                Matrix::new(&b_transposed, k, n, 1, k).unwrap(),
            ];
            for a in a_forms {
                for b in b_forms {
                    let mut output = vec![MaybeUninit::new(f32::NAN); m * n];
                    blas.sgemm(a, b, &mut output);
                    // SAFETY: sgemm wrote every element.
                    let output: Vec<f32> =
                        output.iter().map(|x| unsafe { x.assume_init() }).collect();
                    for (got, want) in output.iter().zip(&expected) {
                        assert!(
                            (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                            "{got} vs {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn operands_blas_cannot_read_are_refused() {
        let data = vec![0.0f32; 100];
        // Neither stride 1 (every other element of every other row).
        assert!(Matrix::new(&data, 4, 4, 20, 2).is_none());
        // The last element beyond the data.
        assert!(Matrix::new(&data, 10, 11, 10, 1).is_none());
        assert!(Matrix::new(&data, 10, 10, 10, 1).is_some());
        // A broadcast row (stride 0) cannot be read.
        assert!(Matrix::new(&data, 4, 4, 0, 1).is_none());
        // One row: any stride of the other dimension is fine.
        assert!(Matrix::new(&data, 1, 10, 7, 3).is_some());
    }
}
