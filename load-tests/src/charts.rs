//! PNG line charts with plotters' bitmap backend. Text uses a TrueType font read at run
//! time (DejaVu Sans or Liberation Sans when present; no fontconfig); without one the
//! chart is drawn without text.

use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::*;

pub struct Chart {
    pub name: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

fn font_loaded() -> bool {
    static LOADED: OnceLock<bool> = OnceLock::new();
    *LOADED.get_or_init(|| {
        for path in FONTS {
            if let Ok(bytes) = std::fs::read(path) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

const COLORS: [RGBColor; 5] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
];

pub fn render(chart: &Chart, path: &Path) -> anyhow::Result<()> {
    let text = font_loaded();
    let points = chart.series.iter().flat_map(|(_, p)| p.iter());
    let (mut x_max, mut y_max) = (0f64, 0f64);
    let (mut x_min, mut y_min) = (f64::MAX, f64::MAX);
    for &(x, y) in points {
        x_max = x_max.max(x);
        y_max = y_max.max(y);
        x_min = x_min.min(x);
        y_min = y_min.min(y);
    }
    if x_min == f64::MAX {
        anyhow::bail!("no data");
    }
    x_min = x_min.min(0.0);
    y_min = y_min.min(0.0);
    let x_max = if x_max > x_min {
        x_max * 1.05
    } else {
        x_min + 1.0
    };
    let y_max = if y_max > y_min {
        y_max * 1.05
    } else {
        y_min + 1.0
    };

    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(15);
    if text {
        builder
            .caption(&chart.title, ("sans-serif", 22))
            .x_label_area_size(45)
            .y_label_area_size(70);
    }
    let mut ctx = builder
        .build_cartesian_2d(x_min..x_max, y_min..y_max)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut mesh = ctx.configure_mesh();
    if text {
        mesh.x_desc(chart.x_label.as_str())
            .y_desc(chart.y_label.as_str())
            .label_style(("sans-serif", 14));
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(|e| anyhow::anyhow!("{e}"))?;
    for (i, (name, pts)) in chart.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let series = ctx
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        if text {
            series.label(name.as_str()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        }
    }
    if text {
        ctx.configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}
