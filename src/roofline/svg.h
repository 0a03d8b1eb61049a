// `lumen roofline --plot`: one hand-written SVG (no dependencies) with two charts side
// by side, 1200 x 800 user units:
//
//   left   the roofline: arithmetic intensity (FLOP/byte, log) against attainable FLOP/s
//          (log), the machine's memory roof (slope = bandwidth) and compute roof, the ridge
//          between them, a dashed second compute roof where the machine has one (int8 or
//          tensor cores), and where prefill at several prompt lengths and decode at several
//          batch sizes sit for the chosen precision
//   right  decode latency per token against context length at batch 1, one line per
//          precision pair, ending where the KV cache stops fitting
#pragma once

#include <string>

#include "roofline/plan.h"

namespace lumen::roofline {

std::string plan_to_svg(const Plan& plan);

}  // namespace lumen::roofline
