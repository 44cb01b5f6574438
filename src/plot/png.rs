//! PNG files of the figures: the same SVG the dashboard shows, rendered by resvg with the
//! DejaVu Sans font that the binary carries (`fonts/`, with its licence), so that a PNG has
//! its labels and looks the same on every machine, fonts installed or not.

use std::sync::{Arc, OnceLock};

use resvg::tiny_skia::{Pixmap, Transform};
use resvg::usvg::{self, fontdb};

/// The font every text of a PNG is drawn with, whatever family the SVG asks for.
const FAMILY: &str = "DejaVu Sans";

/// DejaVu Sans, regular and bold (axis titles are bold).
const FONTS: [&[u8]; 2] = [
    include_bytes!("fonts/DejaVuSans.ttf"),
    include_bytes!("fonts/DejaVuSans-Bold.ttf"),
];

/// Pixels per SVG unit: a figure 640 units wide becomes a PNG 1280 pixels wide, sharp on
/// high-density screens and in printed reports.
pub(crate) const PIXELS_PER_UNIT: f32 = 2.0;

/// The fonts, loaded once.
fn fonts() -> Arc<fontdb::Database> {
    static FONT_DB: OnceLock<Arc<fontdb::Database>> = OnceLock::new();
    FONT_DB
        .get_or_init(|| {
            let mut db = fontdb::Database::new();
            for font in FONTS {
                db.load_font_source(fontdb::Source::Binary(Arc::new(font)));
            }
            for generic in [
                fontdb::Database::set_sans_serif_family,
                fontdb::Database::set_serif_family,
                fontdb::Database::set_monospace_family,
            ] {
                generic(&mut db, FAMILY);
            }
            Arc::new(db)
        })
        .clone()
}

/// Renders a standalone SVG document (its styles inside, as
/// [`super::standalone_svg`] writes it) as a PNG file's bytes.
pub(crate) fn render(svg: &str) -> Result<Vec<u8>, String> {
    let options = usvg::Options {
        font_family: FAMILY.to_string(),
        fontdb: fonts(),
        ..usvg::Options::default()
    };
    let tree = usvg::Tree::from_str(svg, &options)
        .map_err(|e| format!("the figure's SVG does not parse: {e}"))?;
    let size = tree
        .size()
        .to_int_size()
        .scale_by(PIXELS_PER_UNIT)
        .ok_or("the figure has no size")?;
    let mut pixmap = Pixmap::new(size.width(), size.height())
        .ok_or_else(|| format!("cannot draw a {}x{} image", size.width(), size.height()))?;
    resvg::render(
        &tree,
        Transform::from_scale(PIXELS_PER_UNIT, PIXELS_PER_UNIT),
        &mut pixmap.as_mut(),
    );
    pixmap
        .encode_png()
        .map_err(|e| format!("cannot encode the PNG: {e}"))
}
