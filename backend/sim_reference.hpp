// What the sim backend answers for an input: its code points reversed, repeated `repeat` times
// (so answers vary in length). Here rather than in daemon/ so that load generators can check the
// sim backend's answers as they check the cpu backend's.
#pragma once

#include <string>
#include <string_view>

namespace batchd {

std::string sim_expected_output(std::string_view input, unsigned repeat);

}  // namespace batchd
