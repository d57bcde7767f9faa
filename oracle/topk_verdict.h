// File: topk_verdict.h
// A kernel's top-K row judged against the reference's selection (reference/topk.h:
// higher score first, equal scores by lower index, -0.0 == +0.0) under a contract, with
// every difference classified. Definitions for a row of length n, K, m = min(K, n), the
// reference's selection E (its first m entries) and the K-th score tau (the score of E's
// last entry; none when m = 0):
//   ordered   actual[0, m) == E, entry for entry;
//   set       actual[0, m) holds exactly E's indices, in any order;
//   set-ties  actual[0, m) holds every index whose score is above tau, and the rest are
//             indices whose score equals tau (which tied keys at the cut are kept is free);
// and, for the padding, entries [m, K) are -1 (kMinusOne) or are not read (kUnread).
// The classification of a row that differs from E (whatever the contract admits):
//   invalid entries  an index outside [0, n), a duplicate, or -1 among the first m;
//   wrong padding    an entry past m that is not -1 (kMinusOne only);
//   order only       the same set as E in another order;
//   tie swaps        indices of E left out and indices outside E put in, all scoring tau;
//   misses           indices of E left out that score above tau (genuinely dropped), with
//                    their exact rank (position in the reference order, from 1) and gap
//                    to tau;
//   intruders        indices outside E put in that score below tau, with rank and gap;
//   index-order loss two or more misses, each with a higher index than every selected key
//                    scoring at most the best missing score: keys were lost by position,
//                    not by score, as a kernel loses them that gathers candidates into a
//                    buffer of fixed capacity and drops those that arrive after it is full.
// A row passes when its entries are valid, its padding is right and its contract holds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/api.h"

namespace dsaf::oracle {

// The contracts and paddings are those a kernel declares (device/api.h).
using TopKContractKind = dev::TopKContract;
using TopKPaddingKind = dev::TopKPadding;
const char* to_string(TopKContractKind contract);
// "ordered", "set", "set-ties"; throws dsaf::Error(kUsage) naming the choices otherwise.
TopKContractKind parse_topk_contract(const std::string& name);

struct TopKKey {
  int32_t index = -1;
  float score = 0.0f;
  int64_t rank = 0;    // position in the reference order, from 1
  double gap = 0.0;    // score - tau
};

struct TopKRowVerdict {
  bool pass = true;
  int64_t length = 0;     // n
  int k = 0;
  bool has_cut = false;   // m > 0
  float cut_score = 0.0f;  // tau
  std::vector<std::string> invalid;  // one line per invalid entry (the first few)
  int64_t invalid_count = 0;
  int64_t wrong_padding = 0;         // entries past m that are not -1
  bool order_only = false;           // same set as E, other order
  int64_t tie_swaps = 0;             // |E \ A| among keys scoring tau (= |A \ E| at tau)
  std::vector<TopKKey> misses;       // E \ A above the cut
  std::vector<TopKKey> intruders;    // A \ E below the cut
  bool misses_in_index_order = false;  // index-order loss (above)
  bool identical = true;             // actual[0, m) == E and the padding is right

  // One paragraph: what differs, with the scores' bits for the first few keys.
  std::string describe() const;
};

// `scores` holds the row's n valid scores; `actual` the kernel's K entries. Throws
// dsaf::Error(kBadInput) when actual.size() != k or a score is NaN (as the reference does:
// no top-K order holds NaN).
TopKRowVerdict judge_topk_row(const std::vector<float>& scores, int k, const std::vector<int32_t>& actual,
                              TopKContractKind contract, TopKPaddingKind padding);

}  // namespace dsaf::oracle
