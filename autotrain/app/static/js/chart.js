// A small SVG line chart: several series of [x, y] points, axes with round ticks, a legend.

const NS = "http://www.w3.org/2000/svg";
const W = 600, H = 240, M = { left: 70, right: 14, top: 12, bottom: 34 };
export const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"];

function el(name, attrs, text) {
  const node = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

export function fmt(v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return "–";
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-2 || a >= 1e5)) return v.toExponential(1);
  return String(Number(v.toPrecision(3)));
}

function ticks(lo, hi, count = 5) {
  const raw = (hi - lo) / count;
  const base = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * base).find((s) => s >= raw) || raw;
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(Number(t.toPrecision(12)));
  return out;
}

function extent(values) {
  let lo = Math.min(...values), hi = Math.max(...values);
  if (lo === hi) { const pad = Math.abs(lo) * 0.1 || 1; lo -= pad; hi += pad; }
  const pad = (hi - lo) * 0.05;
  return [lo - pad, hi + pad];
}

function axes(svg, xs, ys, sx, sy) {
  for (const t of ticks(...ys)) {
    svg.append(el("line", { class: "grid", x1: M.left, x2: W - M.right, y1: sy(t), y2: sy(t) }));
    svg.append(el("text", { x: M.left - 6, y: sy(t) + 4, "text-anchor": "end" }, fmt(t)));
  }
  for (const t of ticks(...xs, 6).filter((t) => Number.isInteger(t))) {
    svg.append(el("text", { x: sx(t), y: H - M.bottom + 19, "text-anchor": "middle" }, String(t)));
  }
  svg.append(el("line", { class: "axis", x1: M.left, x2: W - M.right, y1: H - M.bottom, y2: H - M.bottom }));
  svg.append(el("line", { class: "axis", x1: M.left, x2: M.left, y1: M.top, y2: H - M.bottom }));
  svg.append(el("text", { x: W - M.right, y: H - 4, "text-anchor": "end" }, "step"));
}

function legend(svg, series) {
  series.forEach((s, i) => {
    const y = M.top + 14 + i * 19, x = W - M.right - 150;
    svg.append(el("line", { x1: x, x2: x + 16, y1: y - 4, y2: y - 4, stroke: s.color, "stroke-width": 3 }));
    svg.append(el("text", { x: x + 22, y }, s.name));
  });
}

// series: [{name, color, points: [[x, y], ...], markers}]; returns how many points were drawn.
export function lineChart(svg, series) {
  svg.replaceChildren();
  const shown = series.filter((s) => s.points.length);
  const all = shown.flatMap((s) => s.points);
  svg.dataset.points = String(all.length);
  if (!all.length) {
    svg.append(el("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "no data yet"));
    return 0;
  }
  const xs = extent(all.map((p) => p[0])), ys = extent(all.map((p) => p[1]));
  const sx = (x) => M.left + ((x - xs[0]) / (xs[1] - xs[0])) * (W - M.left - M.right);
  const sy = (y) => H - M.bottom - ((y - ys[0]) / (ys[1] - ys[0])) * (H - M.top - M.bottom);
  axes(svg, xs, ys, sx, sy);
  for (const s of shown) {
    const pts = s.points.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(" ");
    svg.append(el("polyline", { class: "line", points: pts, stroke: s.color, "data-series": s.name }));
    if (s.markers || s.points.length === 1) {
      for (const [x, y] of s.points) svg.append(el("circle", { cx: sx(x), cy: sy(y), r: 3, fill: s.color }));
    }
  }
  legend(svg, shown);
  svg.dataset.lastStep = String(Math.max(...all.map((p) => p[0])));
  return all.length;
}
