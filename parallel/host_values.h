// The few host values ranks agree on outside the site-accounted traffic (loss sums, squared
// norms, the stop signal, who failed and why), over one group's Communicator: every such call
// goes through the communicator door (counted in its stats) and is watched (parallel/
// watchdog.h), so no layer above parallel/ calls MPI itself.
//
// agree() is how collective errors stay collective (the project rule: bad input gives one clear
// line and a non-zero exit on EVERY rank, never a hang): each rank says whether its part went
// well; all of them learn the lowest failing rank's message and throw the same error together.
#pragma once

#include <string>

#include "compression/sites.h"
#include "parallel/communicator.h"

namespace taco {

// x summed over `group`, in double (MPI's sum of doubles). `site` (a never-compressed one:
// Site::loss_sum, Site::grad_norm, ...) names the call for the watchdog.
double sum_over(Communicator& group, double x, Site site);
// The largest x over `group` (exact for ints).
int max_over(Communicator& group, int x, Site site);

// Collective: true when `ok` on every rank; otherwise false on every rank, with `message` set
// to the lowest failing rank's message. `message` is read on a failing rank only.
// Host-memory groups (MPI, staged): the message travels by broadcast.
bool agree(Communicator& group, bool ok, std::string* message, Site site);

// Rank `root`'s `s` on every rank of `group` (host-memory groups, as agree).
std::string broadcast_string(Communicator& group, const std::string& s, int root, Site site);

}  // namespace taco
