/* plan.c — `fourbit plan RECIPE [--json] [--arch A]`: the resolved plan of a recipe. */
#include "cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static void plan_usage(FILE *f) {
  fprintf(f,
          "usage: fourbit plan RECIPE [--json] [--arch sm_89|sm_90a|sm_100a|sm_103a|sm_120a]\n"
          "\n"
          "Loads RECIPE (a Lua recipe, see recipes/README.md) in a sandbox, validates it, and prints the plan:\n"
          "per layer the format and rounding of every op (forward, backward, dispatch, combine); the unique\n"
          "kernel specs the layers need, with their canonical names and how many tile variants the recipe's\n"
          "tune values allow; the memory per expert-parallel rank; the bits a token moves in dispatch and combine.\n"
          "\n"
          "  --json        one JSON object instead of tables\n"
          "  --arch A      the architecture kernel names are resolved for (default sm_90a)\n"
          "  -h, --help    this text\n"
          "\n"
          "A bad recipe prints one message, file:line: field.path: what is wrong, and exits with status 2.\n");
}

int fb_cli_plan(int argc, char **argv) {
  static const struct option opts[] = {{"json", no_argument, 0, 'j'}, {"arch", required_argument, 0, 'a'},
                                       {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  int json = 0, c;
  const char *arch = "sm_90a";
  optind = 0;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'j': json = 1; break;
    case 'a': arch = optarg; break;
    case 'h': plan_usage(stdout); return 0;
    default:
      fprintf(stderr, "fourbit plan: unknown or incomplete option '%s' (see --help)\n", fb_cli_badopt(argc, argv));
      return 2;
    }
  }
  if (argc - optind != 1) {
    fprintf(stderr, "fourbit plan: expected one RECIPE file (see --help)\n");
    return 2;
  }
  fb_recipe *r = NULL;
  fb_status s = fb_recipe_load(argv[optind], &r);
  if (s != FB_OK) {
    fprintf(stderr, "fourbit plan: %s\n", fb_errmsg());
    return s == FB_ENOMEM ? 1 : 2;
  }
  fb_plan *p = NULL;
  char *text = NULL;
  s = fb_plan_resolve(r, arch, &p);
  if (s == FB_OK) s = json ? fb_plan_json(p, &text) : fb_plan_text(p, &text);
  int rc = 0;
  if (s != FB_OK) {
    fprintf(stderr, "fourbit plan: %s\n", fb_errmsg());
    rc = s == FB_EINVAL ? 2 : 1;
  } else {
    fputs(text, stdout);
    if (fflush(stdout) != 0) rc = 1;
  }
  free(text);
  fb_plan_free(p);
  fb_recipe_free(r);
  return rc;
}
