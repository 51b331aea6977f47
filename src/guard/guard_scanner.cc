// GuardScanner: keyword automaton + regex tail window per chunk, language tracking, and the
// decision of candidate matches once nothing before them can still change.
#include "guard/guard_scanner.h"

#include <algorithm>

namespace lancet::guard {
namespace {

bool is_han(uint32_t cp) {
  return (cp >= 0x3400 && cp <= 0x9FFF) || (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x20000 && cp <= 0x2FFFF);
}

}  // namespace

GuardScanner::GuardScanner(const GuardRules* rules)
    : rules_(rules), regex_next_(rules->num_regexes(), 0), last_literal_(rules->num_regexes(), 0) {}

void GuardScanner::note_languages(std::string_view chunk) {
  if (first_latin_ != UINT64_MAX && first_han_ != UINT64_MAX) return;
  const uint64_t base = kw_state_.offset;
  for (size_t i = 0; i < chunk.size(); ++i) {
    const uint8_t c = static_cast<uint8_t>(chunk[i]);
    if (utf8_need_ > 0 && (c & 0xC0) == 0x80) {
      utf8_cp_ = (utf8_cp_ << 6) | (c & 0x3F);
      if (--utf8_need_ == 0 && is_han(utf8_cp_)) first_han_ = std::min(first_han_, base + i + 1);
      continue;
    }
    utf8_need_ = 0;
    if (c < 0x80) {
      if (((c | 0x20) >= 'a' && (c | 0x20) <= 'z')) first_latin_ = std::min(first_latin_, base + i + 1);
    } else if ((c & 0xE0) == 0xC0) {
      utf8_cp_ = c & 0x1F, utf8_need_ = 1;
    } else if ((c & 0xF0) == 0xE0) {
      utf8_cp_ = c & 0x0F, utf8_need_ = 2;
    } else if ((c & 0xF8) == 0xF0) {
      utf8_cp_ = c & 0x07, utf8_need_ = 3;
    }
  }
}

void GuardScanner::add_match(const GuardRules::Owner& owner, uint64_t start, uint64_t end) {
  if (owner.allow) {
    allow_spans_.push_back({owner.index, start, end});
  } else {
    pending_.push_back({owner.index, start, end});
  }
}

void GuardScanner::note_literals(std::string_view chunk) {
  const KeywordAutomaton& lits = rules_->literal_automaton();
  if (lits.num_keywords() == 0) return;
  kw_matches_.clear();
  lits.scan(chunk, &lit_state_, &kw_matches_);
  for (const auto& m : kw_matches_) {
    uint64_t& last = last_literal_[static_cast<size_t>(rules_->literal_regex(m.pattern))];
    last = std::max(last, m.start + 1);
  }
}

void GuardScanner::scan_combined(bool final, bool* skip) {
  // One search of the alternation of its patterns: none of them matches,
  // completely or in part, before the first (partial) match it reports, so no pattern's search
  // needs to start earlier. Nothing: every pattern is done up to the end. A partial match
  // (streaming) within the window: the patterns wait for more text from there (as one
  // pattern's partial match makes it wait), with no search of their own until the alternation
  // completes or drops it.
  const uint64_t end = kw_state_.offset;
  const uint64_t window = static_cast<uint64_t>(rules_->regex_window());
  uint64_t from = end;
  for (int32_t r : rules_->combined_regexes()) from = std::min(from, regex_next_[static_cast<size_t>(r)]);
  const size_t at = static_cast<size_t>(std::max(from, tail_base_) - tail_base_);
  const RegexMatcher::Found f = rules_->combined_regex()->search(tail_, at, /*partial=*/!final);
  if (f.result == RegexMatcher::Result::kNone) {
    for (int32_t r : rules_->combined_regexes()) regex_next_[static_cast<size_t>(r)] = end;
    *skip = true;
    return;
  }
  const uint64_t first = tail_base_ + f.start;
  for (int32_t r : rules_->combined_regexes())
    regex_next_[static_cast<size_t>(r)] = std::max(regex_next_[static_cast<size_t>(r)], first);
  // A partial match longer than the window is not waited for: the patterns search on their own
  // (each drops its own overlong partial match, a documented limit).
  *skip = f.result == RegexMatcher::Result::kPartial && end - first <= window;
}

void GuardScanner::search_regex(size_t r, bool final) {
  const uint64_t end = kw_state_.offset;
  const uint64_t window = static_cast<uint64_t>(rules_->regex_window());
  const RegexMatcher& re = rules_->regex(r);
  const RegexLiterals& lit = rules_->regex_literals(r);
  size_t from = static_cast<size_t>(std::max(regex_next_[r], tail_base_) - tail_base_);
  for (;;) {
    if (lit.usable) {
      // A complete match contains a required literal at or after its start: with no more text
      // to come and none of them ahead, there is nothing left to find.
      auto none_ahead = [&] { return final && lit.required && last_literal_[r] <= tail_base_ + from; };
      if (!none_ahead()) {
        // No match or partial match starts where the regex could not begin.
        while (from < tail_.size() && !lit.could_start_at(tail_, from)) ++from;
      }
      if (from >= tail_.size() || none_ahead()) {
        regex_next_[r] = end;
        break;
      }
    }
    const RegexMatcher::Found f = re.search(tail_, from, /*partial=*/!final);
    if (f.result == RegexMatcher::Result::kNone) {
      regex_next_[r] = end;
      break;
    }
    if (f.result == RegexMatcher::Result::kPartial) {
      // A match longer than the window is not followed further (documented limit).
      regex_next_[r] = std::max<uint64_t>(tail_base_ + f.start, end > window ? end - window : 0);
      break;
    }
    add_match(rules_->regex_owner(r), tail_base_ + f.start, tail_base_ + f.end);
    from = f.end > f.start ? f.end : f.end + 1;  // a lookaround-only match is empty
    if (from > tail_.size()) {
      regex_next_[r] = end;
      break;
    }
    regex_next_[r] = tail_base_ + f.end;
  }
}

void GuardScanner::scan_regexes(bool final) {
  const uint64_t end = kw_state_.offset;
  const uint64_t window = static_cast<uint64_t>(rules_->regex_window());
  bool skip_combined = false;
  if (rules_->combined_regex()) scan_combined(final, &skip_combined);
  if (!skip_combined)
    for (int32_t r : rules_->combined_regexes()) search_regex(static_cast<size_t>(r), final);
  for (int32_t r : rules_->lone_regexes()) search_regex(static_cast<size_t>(r), final);
  // A filtered regex still waiting on a partial match goes on from there; the others have
  // searched all text before scanned_to_ and start at their first possible start in the new
  // text, found by one pass over it that tests each start group once per byte.
  handled_.assign(rules_->num_regexes(), 0);
  size_t waiting = 0;
  for (int32_t ri : rules_->filtered_regexes()) {
    const size_t r = static_cast<size_t>(ri);
    const RegexLiterals& lit = rules_->regex_literals(r);
    if (regex_next_[r] < scanned_to_) {
      search_regex(r, final);
      handled_[r] = 1;
    } else if (final && lit.required && last_literal_[r] <= scanned_to_) {
      regex_next_[r] = end;  // no required literal ahead: nothing to find
      handled_[r] = 1;
    } else {
      ++waiting;
    }
  }
  for (size_t s = static_cast<size_t>(scanned_to_ - tail_base_); s < tail_.size() && waiting > 0; ++s) {
    for (int32_t gi : rules_->groups_at(static_cast<uint8_t>(tail_[s]))) {
      const GuardRules::StartGroup& group = rules_->start_group(gi);
      bool open = false;
      for (int32_t r : group.regexes) open = open || !handled_[static_cast<size_t>(r)];
      if (!open || !group.literals->could_start_at(tail_, s)) continue;
      for (int32_t ri : group.regexes) {
        const size_t r = static_cast<size_t>(ri);
        if (handled_[r]) continue;
        handled_[r] = 1;
        --waiting;
        regex_next_[r] = tail_base_ + s;
        search_regex(r, final);
      }
    }
  }
  for (int32_t r : rules_->filtered_regexes())
    if (!handled_[static_cast<size_t>(r)]) regex_next_[static_cast<size_t>(r)] = end;
  scanned_to_ = end;
  // Keep the window for lookbehinds and partial matches, starting on a character boundary.
  if (tail_.size() > window) {
    size_t cut = tail_.size() - window;
    for (size_t r = 0; r < regex_next_.size(); ++r)
      cut = std::min<size_t>(cut, static_cast<size_t>(regex_next_[r] - tail_base_));
    while (cut > 0 && cut < tail_.size() && (static_cast<uint8_t>(tail_[cut]) & 0xC0) == 0x80) --cut;
    tail_.erase(0, cut);
    tail_base_ += cut;
  }
}

bool GuardScanner::applies(const Hit& h) const {
  const GuardRules::Rule& rule = rules_->rules()[static_cast<size_t>(h.rule)];
  if (rule.lang == Lang::kEn && first_latin_ > h.end) return false;
  if (rule.lang == Lang::kZh && first_han_ > h.end) return false;
  for (const Span& s : allow_spans_)
    if (s.start <= h.start && s.end >= h.end && rules_->exempts(s.allow, h.rule)) return false;
  return true;
}

void GuardScanner::decide(uint64_t frontier) {
  frontier_ = std::max(frontier_, frontier);
  size_t kept = 0;
  for (const Hit& h : pending_) {
    if (h.start >= frontier_) {
      pending_[kept++] = h;
      continue;
    }
    if (!applies(h)) continue;
    hits_.push_back(h);
    if (rules_->rules()[static_cast<size_t>(h.rule)].action == Action::kBlock && (!block_ || h.start < block_->start))
      block_ = h;
  }
  pending_.resize(kept);
  // Allow matches that end before every pending candidate can cover none of them.
  uint64_t min_end = UINT64_MAX;
  for (const Hit& h : pending_) min_end = std::min(min_end, h.end);
  std::erase_if(allow_spans_, [&](const Span& s) { return s.end < min_end && s.end <= frontier_; });
}

void GuardScanner::feed(std::string_view chunk) {
  if (chunk.empty()) return;
  note_languages(chunk);
  kw_matches_.clear();
  rules_->keywords().scan(chunk, &kw_state_, &kw_matches_);
  for (const auto& m : kw_matches_) add_match(rules_->keyword_owner(m.pattern), m.start, m.end);
  note_literals(chunk);
  uint64_t frontier = kw_state_.offset - static_cast<uint64_t>(rules_->keywords().live_depth(kw_state_));
  if (rules_->num_regexes() > 0) {
    tail_.append(chunk);
    scan_regexes(/*final=*/false);
    for (uint64_t n : regex_next_) frontier = std::min(frontier, n);
  }
  decide(frontier);
}

void GuardScanner::finish() {
  if (rules_->num_regexes() > 0) scan_regexes(/*final=*/true);
  decide(UINT64_MAX);
}

void GuardScanner::scan_all(std::string_view text) {
  note_languages(text);
  kw_matches_.clear();
  rules_->keywords().scan(text, &kw_state_, &kw_matches_);
  for (const auto& m : kw_matches_) add_match(rules_->keyword_owner(m.pattern), m.start, m.end);
  note_literals(text);
  if (rules_->num_regexes() > 0) {
    tail_.append(text);
    scan_regexes(/*final=*/true);
  }
  decide(UINT64_MAX);
}

uint64_t GuardScanner::safe_end() const {
  if (block_) return block_->start;
  uint64_t end = std::min(frontier_, kw_state_.offset);
  for (const Hit& h : pending_) end = std::min(end, h.start);
  return end;
}

Verdict scan_text(const GuardRules& rules, std::string_view text) {
  GuardScanner s(&rules);
  s.scan_all(text);
  return Verdict{s.hits(), s.block()};
}

}  // namespace lancet::guard
