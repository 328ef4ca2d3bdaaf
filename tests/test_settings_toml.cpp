// RUN_DIR/config.toml's writer (include/cnn/settings_toml.hpp, run_settings_file.hpp): a key for every
// long option of the command line, strings escaped as TOML requires, floats that read back exactly, and
// a file per start that never replaces another. Needs no toml++: runs in every build.
#define BOOST_TEST_MODULE settings_toml
#include "boost_test.hpp"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cnn/build_info.hpp"
#include "cnn/cli.hpp"
#include "cnn/errors.hpp"
#include "cnn/run_settings_file.hpp"
#include "cnn/settings_toml.hpp"
#include "test_files.hpp"

using namespace cnn;
using cnn::test::TempDir;

namespace {

CliResult parse(std::vector<std::string> words) {
  words.insert(words.begin(), "cnn_mpi");
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

// The keys of "key = value" lines; comment lines are not keys.
std::set<std::string> keys_of(const std::string& toml) {
  std::set<std::string> keys;
  std::istringstream lines(toml);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const std::size_t equals = line.find(" = ");
    BOOST_REQUIRE_MESSAGE(equals != std::string::npos, "not a key = value line: " << line);
    keys.insert(line.substr(0, equals));
  }
  return keys;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

// The lead merges options from several branches: one that config.toml forgets fails here, by name.
BOOST_AUTO_TEST_CASE(every_long_option_has_a_key_and_every_key_is_an_option) {
  CliResult cli = parse({});
  resolve_config(cli.config, 1, 1, -1);
  const std::set<std::string> keys = keys_of(settings_toml(cli.config, ""));
  BOOST_REQUIRE_GE(cli.options.size(), 30U);  // the command line's options were listed at all
  std::set<std::string> options;
  for (const LongOption& option : cli.options) {
    options.insert(option.name);
    BOOST_CHECK_MESSAGE(keys.count(option.name) == 1,
                        "--" << option.name << " has no key in config.toml: add its line to option_values() in "
                                               "src/app/settings_toml.cpp");
  }
  for (const std::string& key : keys)
    BOOST_CHECK_MESSAGE(key == kCommandKey || options.count(key) == 1,
                        "config.toml writes '" << key << "', which is no long option of the command line");
  BOOST_CHECK(keys.count(kCommandKey) == 1);
  BOOST_CHECK(options.count("help") == 0 && options.count("version") == 0 && options.count("config") == 0);
}

BOOST_AUTO_TEST_CASE(option_kinds_follow_the_command_line) {
  const CliResult cli = parse({});
  const auto kind = [&](const std::string& name) {
    for (const LongOption& option : cli.options)
      if (option.name == name) return option.kind;
    BOOST_FAIL("no option --" << name);
    return OptionValueKind::kText;
  };
  BOOST_CHECK(kind("quiet") == OptionValueKind::kFlag);
  BOOST_CHECK(kind("epochs") == OptionValueKind::kInteger);
  BOOST_CHECK(kind("seed") == OptionValueKind::kUnsigned);
  BOOST_CHECK(kind("lr") == OptionValueKind::kNumber);
  BOOST_CHECK(kind("model") == OptionValueKind::kText);
  BOOST_CHECK(kind("steps-per-launch") == OptionValueKind::kAutoOrInteger);
}

BOOST_AUTO_TEST_CASE(strings_are_escaped_as_toml_requires) {
  BOOST_CHECK_EQUAL(*toml_string("runs/a"), "\"runs/a\"");
  BOOST_CHECK_EQUAL(*toml_string("say \"hi\" \\ there"), "\"say \\\"hi\\\" \\\\ there\"");
  BOOST_CHECK_EQUAL(*toml_string("a\tb\nc\rd\be\ff"), "\"a\\tb\\nc\\rd\\be\\ff\"");
  BOOST_CHECK_EQUAL(*toml_string(std::string("\x01x\x1f\x7f", 4)), "\"\\u0001x\\u001f\\u007f\"");
  BOOST_CHECK_EQUAL(*toml_string("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
  BOOST_CHECK_EQUAL(*toml_string(""), "\"\"");
  // Not UTF-8: a stray byte, a cut sequence, an overlong '/', a surrogate, above U+10FFFF.
  for (const char* bad : {"\xff", "a\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80"})
    BOOST_CHECK_MESSAGE(!toml_string(bad), "accepted a string that is not UTF-8");
}

BOOST_AUTO_TEST_CASE(floats_read_back_exactly_and_stay_floats) {
  for (const double value : {0.1, 1e-8, 300.0, 0.999, 1e300, 5e-324, 0.9999999, 123456789.0}) {
    const std::string text = toml_float(value);
    BOOST_CHECK_MESSAGE(text.find_first_of(".e") != std::string::npos, text << " would read as a TOML integer");
    BOOST_CHECK_MESSAGE(std::strtod(text.c_str(), nullptr) == value, text << " does not read back as " << value);
  }
  BOOST_CHECK_EQUAL(toml_float(0.1), "0.1");
  BOOST_CHECK_EQUAL(toml_float(300.0), "300.0");
}

BOOST_AUTO_TEST_CASE(a_seed_beyond_toml_integers_is_a_string_and_bad_utf8_a_comment) {
  CliResult cli = parse({"--seed", "18446744073709551615", "--out", "runs/\xff"});
  resolve_config(cli.config, 1, 1, -1);
  const std::string text = settings_toml(cli.config, "");
  BOOST_CHECK(text.find("seed = \"18446744073709551615\"\n") != std::string::npos);
  BOOST_CHECK(text.find("\n# out: not valid UTF-8") != std::string::npos);
  BOOST_CHECK(keys_of(text).count("out") == 0);
}

BOOST_AUTO_TEST_CASE(the_header_names_version_commit_and_start) {
  const std::string header = settings_toml_header("abc123", 4, "runs/x/checkpoints/ckpt-e0001-s00000002.h5\nforged");
  BOOST_CHECK(header.find(std::string("# version: ") + CNN_VERSION + "\n") != std::string::npos);
  BOOST_CHECK(header.find(std::string("# commit: ") + source_id() + "\n") != std::string::npos);
  BOOST_CHECK(header.find("run abc123") != std::string::npos && header.find("4 ranks") != std::string::npos);
  BOOST_CHECK(header.find("resumed from runs/x/checkpoints/ckpt-e0001-s00000002.h5?forged") != std::string::npos);
  std::istringstream lines(header);
  for (std::string line; std::getline(lines, line);) BOOST_CHECK_MESSAGE(line.rfind("# ", 0) == 0, "not a comment: " << line);
}

BOOST_AUTO_TEST_CASE(each_start_writes_its_own_file_and_none_is_replaced) {
  TempDir dir;
  BOOST_CHECK_EQUAL(write_run_settings(dir.path, "first\n"), dir.file("config.toml"));
  BOOST_CHECK_EQUAL(write_run_settings(dir.path, "second\n"), dir.file("config.resume-1.toml"));
  // A name taken by anything (here a FIFO) is skipped, not written through.
  BOOST_REQUIRE_EQUAL(::mkfifo(dir.file("config.resume-2.toml").c_str(), 0644), 0);
  std::ofstream(dir.file("config.resume-3.toml.tmp")) << "a stale temporary of a killed start";
  BOOST_CHECK_EQUAL(write_run_settings(dir.path, "third\n"), dir.file("config.resume-3.toml"));
  BOOST_CHECK_EQUAL(read_all(dir.file("config.toml")), "first\n");
  BOOST_CHECK_EQUAL(read_all(dir.file("config.resume-1.toml")), "second\n");
  BOOST_CHECK_EQUAL(read_all(dir.file("config.resume-3.toml")), "third\n");
  struct stat info {};
  BOOST_CHECK(::stat(dir.file("config.resume-3.toml.tmp").c_str(), &info) != 0);
  BOOST_CHECK_THROW(write_run_settings(dir.file("missing_dir"), "x\n"), IoError);
}
