//! SVG charts drawn with plotters (SVG backend, no font files: text is written as SVG
//! `<text>` and laid out by plotters' estimate, so the viewer's sans-serif font renders it).

use std::error::Error;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

type Res = Result<(), Box<dyn Error>>;

/// Series colours, in order.
const COLOURS: [RGBColor; 6] = [
    RGBColor(0xd6, 0x27, 0x28), // red
    RGBColor(0x1f, 0x77, 0xb4), // blue
    RGBColor(0xff, 0x7f, 0x0e), // orange
    RGBColor(0x2c, 0xa0, 0x2c), // green
    RGBColor(0x94, 0x67, 0xbd), // purple
    RGBColor(0x8c, 0x56, 0x4b), // brown
];

/// The colour of series `i`.
pub fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

/// A named line of `(x, y)` points.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// The points.
    pub points: Vec<(f64, f64)>,
    /// Colour index (see [`colour`]).
    pub colour: usize,
    /// Drawn thinner, without markers.
    pub thin: bool,
    /// Each point labelled with its y value.
    pub annotate: bool,
}

fn upper(max: f64) -> f64 {
    if max.is_finite() && max > 0.0 {
        max * 1.12
    } else {
        1.0
    }
}

/// One chart of a figure.
#[derive(Debug, Clone, Default)]
pub struct Panel {
    /// Caption.
    pub title: String,
    /// x axis description.
    pub x_desc: String,
    /// y axis description.
    pub y_desc: String,
    /// The lines.
    pub series: Vec<Series>,
    /// x ranges drawn as light red bands (e.g. failure windows).
    pub shaded: Vec<(f64, f64)>,
    /// The bands' legend text.
    pub shaded_label: String,
    /// Label only whole numbers on the x axis (e.g. failure 1, 2, 3, 4).
    pub integer_x: bool,
}

/// A line chart of one panel.
pub fn line_chart(path: &Path, panel: &Panel) -> Res {
    panels_chart(path, std::slice::from_ref(panel))
}

/// Line charts stacked vertically in one SVG.
pub fn panels_chart(path: &Path, panels: &[Panel]) -> Res {
    let height = 500 + 380 * panels.len().saturating_sub(1) as u32;
    let root = SVGBackend::new(path, (860, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    for (panel, area) in panels.iter().zip(&areas) {
        draw_panel(area, panel)?;
    }
    root.present()?;
    Ok(())
}

/// The panel's x range (its points and shaded bands, padded) and the top of its y axis.
fn ranges(p: &Panel) -> (f64, f64, f64) {
    let pts = p.series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    for &(a, b) in &p.shaded {
        x0 = x0.min(a);
        x1 = x1.max(b);
    }
    if !x0.is_finite() || !x1.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    let pad = ((x1 - x0) * 0.04).max(0.05);
    (x0 - pad, x1 + pad, upper(y1))
}

fn draw_panel(area: &DrawingArea<SVGBackend<'_>, Shift>, p: &Panel) -> Res {
    let (x0, x1, y1) = ranges(p);
    let mut chart = ChartBuilder::on(area)
        .caption(p.title.as_str(), ("sans-serif", 19))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, 0.0..y1)?;
    let whole = |x: &f64| {
        if (x - x.round()).abs() < 1e-6 {
            format!("{x:.0}")
        } else {
            String::new()
        }
    };
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(p.x_desc.as_str())
        .y_desc(p.y_desc.as_str())
        .light_line_style(RGBColor(235, 235, 235));
    if p.integer_x {
        mesh.x_labels(((x1 - x0).ceil() as usize + 1).max(2))
            .x_label_formatter(&whole);
    }
    mesh.draw()?;
    if !p.shaded.is_empty() {
        let band = RGBColor(0xd6, 0x27, 0x28).mix(0.12);
        chart
            .draw_series(
                p.shaded
                    .iter()
                    .map(|&(a, b)| Rectangle::new([(a, 0.0), (b, y1)], band.filled())),
            )?
            .label(p.shaded_label.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 20, y + 5)], band.filled()));
    }
    for s in &p.series {
        let c = colour(s.colour);
        let style = if s.thin {
            c.stroke_width(1)
        } else {
            c.stroke_width(2)
        };
        let line = LineSeries::new(s.points.iter().copied(), style);
        let line = if s.thin { line } else { line.point_size(3) };
        chart
            .draw_series(line)?
            .label(s.label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        if s.annotate {
            let font = ("sans-serif", 12).into_font().color(&c);
            chart.draw_series(s.points.iter().map(|&(x, y)| {
                let text = if y >= 100.0 {
                    format!("{y:.0}")
                } else {
                    format!("{y:.1}")
                };
                // Above and right of the point, clear of the line and the axis.
                EmptyElement::at((x, y)) + Text::new(text, (5, -17), font.clone())
            }))?;
        }
    }
    if !p.series.is_empty() || !p.shaded.is_empty() {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(180, 180, 180))
            .label_font(("sans-serif", 13))
            .draw()?;
    }
    Ok(())
}

/// A bar chart of `values` named by `labels`, with an annotation under the title.
pub fn bar_chart(path: &Path, title: &str, y_desc: &str, labels: &[String], values: &[f64]) -> Res {
    let root = SVGBackend::new(path, (860, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = labels.len().max(1);
    let y1 = upper(values.iter().copied().fold(0.0, f64::max));
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d((0..n - 1).into_segmented(), 0.0..y1)?;
    let names = labels.to_vec();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                names.get(*i).cloned().unwrap_or_default()
            }
            SegmentValue::Last => String::new(),
        })
        .y_desc(y_desc)
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    chart.draw_series(values.iter().enumerate().map(|(i, &v)| {
        let mut bar = Rectangle::new(
            [
                (SegmentValue::Exact(i), 0.0),
                (SegmentValue::Exact(i + 1), v),
            ],
            colour(1).filled(),
        );
        bar.set_margin(0, 0, 12, 12);
        bar
    }))?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_with_text() {
        let dir = std::env::temp_dir().join(format!("weir-paper-charts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let line = dir.join("line.svg");
        let panel = Panel {
            title: "Recovery per failure".into(),
            x_desc: "failure".into(),
            y_desc: "ms".into(),
            series: vec![
                Series {
                    label: "restart-all".into(),
                    points: vec![(1.0, 400.0), (2.0, 450.0)],
                    colour: 0,
                    thin: false,
                    annotate: true,
                },
                Series {
                    label: "bqbs".into(),
                    points: vec![(1.0, 20.0), (2.0, 25.0)],
                    colour: 1,
                    thin: true,
                    annotate: false,
                },
            ],
            shaded: vec![(1.2, 1.4)],
            shaded_label: "failure window".into(),
            integer_x: true,
        };
        line_chart(&line, &panel).unwrap();
        let svg = std::fs::read_to_string(&line).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        for t in [
            "Recovery per failure",
            "restart-all",
            "bqbs",
            "failure window",
            "<polyline",
        ] {
            assert!(svg.contains(t), "no {t} in the SVG");
        }
        let bars = dir.join("bars.svg");
        bar_chart(
            &bars,
            "Criticality",
            "ms",
            &["flat_map".into(), "filter".into()],
            &[30.0, 20.0],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&bars).unwrap();
        assert!(svg.contains("flat_map") && svg.contains("<rect"));
        // Degenerate input still draws.
        line_chart(&dir.join("empty.svg"), &Panel::default()).unwrap();
        panels_chart(&dir.join("two.svg"), &[panel.clone(), panel]).unwrap();
        bar_chart(&dir.join("one.svg"), "t", "y", &["a".into()], &[1.0]).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
