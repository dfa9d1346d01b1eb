#include "store/slot_journal.h"

namespace lmcache::store {

LMC_STATS_ROWS(JournalStatRows, JournalStats, LMC_JOURNAL_STATS)

}  // namespace lmcache::store
