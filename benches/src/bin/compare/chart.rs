//! docs/throughput.svg.

use super::*;

pub(crate) fn chart(
    path: &str,
    all: &[(Scenario, Results)],
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;

    let colors = [
        RGBColor(200, 30, 45),
        RGBColor(40, 90, 180),
        RGBColor(110, 110, 110),
    ];
    let root = SVGBackend::new(path, (420 * all.len() as u32, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    let rates = || {
        all.iter()
            .flat_map(|(_, r)| r.load.iter().flatten().map(Load::rate))
    };
    let max = rates().fold(1.0f64, f64::max);
    let min = rates().filter(|&r| r > 0.0).fold(max, f64::min);
    let floor = (min / 2.0).max(0.1);
    let panels = root.split_evenly((1, all.len()));
    for (area, (scenario, r)) in panels.iter().zip(all) {
        let mut chart = ChartBuilder::on(area)
            .caption(scenario.name(), ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((1u32..300u32).log_scale(), (floor..max * 2.0).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("concurrent tasks (distinct keys)")
            .y_desc("lock+release cycles/s")
            .x_label_formatter(&|x| x.to_string())
            .y_label_formatter(&|y| {
                if *y < 1.0 {
                    format!("{y:.1}")
                } else {
                    format!("{y:.0}")
                }
            })
            .draw()?;
        for (i, which) in CLIENTS.iter().enumerate() {
            let color = colors[i];
            let points: Vec<(u32, f64)> = CONCURRENCY
                .iter()
                .zip(&r.load[i])
                .map(|(&c, l)| (c as u32, l.rate().max(floor)))
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                .label(which.name())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
