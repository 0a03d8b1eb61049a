// The convert layer's name for base/progress.h's Progress (quantize, imatrix, AWQ report
// through it).
#pragma once

#include "base/progress.h"

namespace lumen::convert {

using Progress = ::lumen::Progress;

}  // namespace lumen::convert
