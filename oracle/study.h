// File: study.h
// The CPU studies behind `sweep` and `needle`, in one include: their building blocks
// (study_keys.h), the sweep (sweep.h), the needle study (needle.h) and the writer of
// their result files (results_io.h).
#pragma once

#include "oracle/needle.h"
#include "oracle/results_io.h"
#include "oracle/study_keys.h"
#include "oracle/sweep.h"
